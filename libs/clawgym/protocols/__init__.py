"""Harness-facing wire protocols: Anthropic Messages, OpenAI Chat Completions, OpenAI Responses.

One module per protocol, each with the same sections in the same order: wire models, request →
`Conversation`, completion → JSON, SSE events, errors, quirks. Every protocol converts to the
canonical `clawgym.protocols.conversation.Conversation`; nothing past the proxy sees wire JSON.
"""
