"""Inference engines: token ids in, token ids + logprobs + policy version out."""
