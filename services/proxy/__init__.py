"""The proxy service: harness-facing HTTP (Anthropic Messages, OpenAI Chat, OpenAI Responses) with capture."""
