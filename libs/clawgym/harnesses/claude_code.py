"""Claude Code (`@anthropic-ai/claude-code`): Anthropic Messages, pointed at the proxy by env alone.

`ANTHROPIC_BASE_URL` is the proxy's root (Claude Code adds `/v1/messages` itself); the rollout
token goes out as `x-api-key`. `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1` removes every other
request (telemetry, feature flags, `/api/hello`, title calls). The CLI has no turn cap; the
sandbox's timeout bounds the run. `--permission-mode acceptEdits` because the sandbox user looks
like root, and Claude Code refuses `--dangerously-skip-permissions` as root.

Context compaction: for a model name it does not know Claude Code assumes a 1M-token context and
never compacts before the server refuses a prompt. `context_window` (the policy's context in
tokens) makes it compact at `COMPACT_AT` of that, through its own settings: a window of at least its
100k minimum (`CLAUDE_CODE_AUTO_COMPACT_WINDOW`) and the percentage of it that is `COMPACT_AT` ×
the policy's context (`CLAUDE_AUTOCOMPACT_PCT_OVERRIDE`). The compaction is then a branch of the
rollout's tree (`tests/harnesses/test_real_branches.py`).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from clawgym.errors import InvalidArgument
from clawgym.harnesses.base import HarnessAdapter, InstallSpec, Limits, ProtocolName, RunContext

MIN_WINDOW = 100_000  # the smallest CLAUDE_CODE_AUTO_COMPACT_WINDOW the CLI takes
COMPACT_AT = 0.8  # of the policy's context: room is left for the reply and the summary request


class ClaudeCode(HarnessAdapter):
    name: ClassVar[str] = "claude-code"
    protocol: ClassVar[ProtocolName] = "anthropic_messages"
    install_spec: ClassVar[InstallSpec] = InstallSpec(
        "npm", "@anthropic-ai/claude-code", "2.1.332", bin="claude"
    )
    options: ClassVar[tuple[str, ...]] = ("context_window",)

    def __init__(
        self, cache_dir: str | Path | None = None, limits: Limits | None = None, context_window: int | None = None
    ) -> None:
        if context_window is not None and context_window < 1:
            raise InvalidArgument(f"claude-code context_window {context_window}: a positive token count")
        super().__init__(cache_dir, limits)
        self.context_window = context_window

    def command(self, instruction: str, ctx: RunContext) -> list[str]:
        return [
            self.executable(),
            "-p",
            instruction,
            "--permission-mode",
            "acceptEdits",
            "--output-format",
            "json",
        ]

    def env(self, ctx: RunContext) -> dict[str, str]:
        return {
            **super().env(ctx),
            "ANTHROPIC_BASE_URL": ctx.proxy_url.rstrip("/"),
            "ANTHROPIC_API_KEY": ctx.token,
            "ANTHROPIC_MODEL": ctx.model,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": ctx.model,  # background calls would otherwise name a model we lack
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            **self._compaction(),
        }

    def _compaction(self) -> dict[str, str]:
        if self.context_window is None:
            return {}
        window = max(MIN_WINDOW, self.context_window)
        percent = 100 * COMPACT_AT * self.context_window / window
        return {"CLAUDE_CODE_AUTO_COMPACT_WINDOW": str(window), "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE": f"{percent:.4g}"}
