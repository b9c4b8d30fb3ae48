"""The inference service: token ids in, token ids + logprobs + policy version out, over gRPC."""
