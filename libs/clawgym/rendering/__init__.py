"""Rendering: canonical conversations → prompt token ids with the policy's chat template, and back.

`template` applies the chat template (tools included, or described in the system prompt),
`control_tokens` keeps control-token strings in harness text ordinary tokens,
`splice` reuses the exact ids of generated turns, `tool_formats` parses generated text into text,
thinking and tool calls in each model family's format (`toolcalls`: the Hermes/Qwen one),
`detokenize` streams text out of token ids.
"""
