"""Claude Code (`@anthropic-ai/claude-code`): Anthropic Messages, pointed at the proxy by env alone.

`ANTHROPIC_BASE_URL` is the proxy's root (Claude Code adds `/v1/messages` itself); the rollout
token goes out as `x-api-key`. `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1` removes every other
request (telemetry, feature flags, `/api/hello`, title calls). The CLI has no turn cap; the
sandbox's timeout bounds the run. `--permission-mode acceptEdits` because the sandbox user looks
like root, and Claude Code refuses `--dangerously-skip-permissions` as root.
"""

from __future__ import annotations

from typing import ClassVar

from clawgym.harnesses.base import HarnessAdapter, InstallSpec, ProtocolName, RunContext


class ClaudeCode(HarnessAdapter):
    name: ClassVar[str] = "claude-code"
    protocol: ClassVar[ProtocolName] = "anthropic_messages"
    install_spec: ClassVar[InstallSpec] = InstallSpec(
        "npm", "@anthropic-ai/claude-code", "2.1.332", bin="claude"
    )

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
        }
