"""opencode (`opencode-ai`): Chat Completions through an OpenAI-compatible provider given in env.

The whole config travels in `OPENCODE_CONFIG_CONTENT`; `OPENCODE_DISABLE_MODELS_FETCH=1` stops
the models.dev lookup and `OPENCODE_DISABLE_AUTOUPDATE=1` the update check. Every run first makes
a title-generation call to the same model (it is captured like any other call). The prompt
arrives at the model wrapped in literal double quotes. No turn cap; the sandbox's timeout bounds it.
"""

from __future__ import annotations

import json
from typing import ClassVar

from clawgym.harnesses.base import HarnessAdapter, InstallSpec, ProtocolName, RunContext

PROVIDER = "clawgym"


class OpenCode(HarnessAdapter):
    name: ClassVar[str] = "opencode"
    protocol: ClassVar[ProtocolName] = "openai_chat"
    install_spec: ClassVar[InstallSpec] = InstallSpec("npm", "opencode-ai", "1.18.33", bin="opencode")

    def command(self, instruction: str, ctx: RunContext) -> list[str]:
        return [self.executable(), "run", "--auto", instruction]

    def env(self, ctx: RunContext) -> dict[str, str]:
        config = {
            "model": f"{PROVIDER}/{ctx.model}",
            "provider": {
                PROVIDER: {
                    "npm": "@ai-sdk/openai-compatible",
                    "options": {"baseURL": ctx.v1, "apiKey": ctx.token},
                    "models": {ctx.model: {"tool_call": True}},
                }
            },
        }
        return {
            **super().env(ctx),
            "OPENCODE_CONFIG_CONTENT": json.dumps(config),
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
        }
