"""`JudgeConfig`: which OpenAI-compatible endpoint scores hybrid tasks' rubrics (`orchestrator.judge`)."""

from __future__ import annotations

import os

from pydantic import Field

from clawgym.section import Section


class JudgeConfig(Section):
    """The LLM judge of rubric rewards. Empty `base_url`: no judge (hybrid tasks score code only)."""

    base_url: str = Field(
        "",
        description="OpenAI-compatible API base, e.g. https://api.openai.com/v1 or the proxy's "
        "http://127.0.0.1:8000/v1 ({base_url}/chat/completions is called); empty = no judge",
    )
    model: str = Field("", description="the judge model's name, sent as `model`")
    api_key_env: str = Field(
        "CLAWGYM_JUDGE_API_KEY",
        description="environment variable holding the judge's API key (never the config)",
    )
    timeout_s: float = Field(120.0, gt=0, description="per judge request")
    retries: int = Field(
        2,
        ge=0,
        description="extra tries after a transport error, a timeout, 429 or 5xx (not after an answer)",
    )
    retry_backoff_s: float = Field(1.0, ge=0, description="pause before a retry (doubles per try)")
    temperature: float = Field(0.0, ge=0, description="sampling temperature of the judge")
    max_tokens: int = Field(1024, ge=1, description="the judge answer's token limit")
    max_file_chars: int = Field(
        20000,
        ge=100,
        description="characters of each judged output file, of the agent's last answer and of the harness "
        "output shown to the judge (cut in the middle, said so)",
    )
    max_file_bytes: int = Field(
        65536,
        ge=200,
        le=16 << 20,
        description="bytes of each judged output file read from the sandbox: its first and last halves, "
        "never the middle of a larger file (so a huge file costs the orchestrator no more memory than this)",
    )

    @property
    def enabled(self) -> bool:
        return bool(self.base_url)

    def api_key(self) -> str:
        return os.environ.get(self.api_key_env, "") if self.api_key_env else ""
