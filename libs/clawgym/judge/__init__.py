"""Rubric scoring by an LLM judge behind any OpenAI-compatible `/v1/chat/completions` endpoint.

`config.JudgeConfig` (`orchestrator.judge`), `evidence` (what the judge is shown, read from the
sandbox before it is destroyed), `prompt` (the messages), `parse` (answer → rule scores), `client`
(the HTTP call, timeout, retries), `hybrid` (code verdict + rubric score → reward and breakdown).
"""
