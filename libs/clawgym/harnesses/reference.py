"""The reference harness: `reference_agent.py`, a standalone Chat Completions shell agent.

The agent script travels into the sandbox as a file in the run's HOME, so any backend with a
`python3` runs it (nothing to install, nothing of clawgym imported). Fenced-bash text actions by
default (what a small policy can learn); `mode="tools"` gives it a `bash` function tool instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from clawgym.harnesses.base import HarnessAdapter, Limits, ProtocolName, RunContext, under

AGENT_SCRIPT = Path(__file__).with_name("reference_agent.py")


class Reference(HarnessAdapter):
    name: ClassVar[str] = "reference"
    protocol: ClassVar[ProtocolName] = "openai_chat"
    default_limits: ClassVar[Limits] = Limits(timeout_s=600.0, max_turns=4)
    options: ClassVar[tuple[str, ...]] = ("mode", "max_tokens", "command_timeout_s")

    def __init__(
        self,
        cache_dir: str | Path | None = None,
        limits: Limits | None = None,
        mode: str = "text",
        max_tokens: int = 256,
        command_timeout_s: float = 30.0,
    ) -> None:
        super().__init__(cache_dir, limits)
        self.mode, self.max_tokens, self.command_timeout_s = mode, max_tokens, command_timeout_s

    def script_path(self, ctx: RunContext) -> str:
        return under(ctx.home, ".clawgym", "reference_agent.py")

    def command(self, instruction: str, ctx: RunContext) -> list[str]:
        return [
            "python3",
            self.script_path(ctx),
            "--base-url",
            ctx.v1,
            "--model",
            ctx.model,
            "--mode",
            self.mode,
            "--workdir",
            ctx.workdir,
            "--max-turns",
            str(self.limits.max_turns or 8),
            "--max-tokens",
            str(self.max_tokens),
            "--command-timeout",
            str(self.command_timeout_s),
            "--total-timeout",
            str(self.limits.timeout_s),
            instruction,
        ]

    def env(self, ctx: RunContext) -> dict[str, str]:
        return {**super().env(ctx), "OPENAI_API_KEY": ctx.token}

    def config_files(self, ctx: RunContext) -> dict[str, str]:
        return {self.script_path(ctx): AGENT_SCRIPT.read_text()}
