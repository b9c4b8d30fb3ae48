"""opencode (`opencode-ai`): Chat Completions through an OpenAI-compatible provider given in env.

The whole config travels in `OPENCODE_CONFIG_CONTENT`; `OPENCODE_DISABLE_MODELS_FETCH=1` stops
the models.dev lookup and `OPENCODE_DISABLE_AUTOUPDATE=1` the update check. Its JavaScript
engine's garbage collector marks with `gc_markers` threads (`BUN_JSC_numberOfGCMarkers`, default 1):
the parallel markers spin while opencode waits on a model call, and on a few cores that takes the
CPU from the policy it waits for (`bench/opencode_gc.py`). Every run first makes
a title-generation call to the same model (it is captured like any other call). The prompt
arrives at the model wrapped in literal double quotes. No turn cap; the sandbox's timeout bounds it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

from clawgym.errors import InvalidArgument
from clawgym.harnesses.base import HarnessAdapter, InstallSpec, Limits, ProtocolName, RunContext

PROVIDER = "clawgym"


class OpenCode(HarnessAdapter):
    name: ClassVar[str] = "opencode"
    protocol: ClassVar[ProtocolName] = "openai_chat"
    install_spec: ClassVar[InstallSpec] = InstallSpec("npm", "opencode-ai", "1.18.33", bin="opencode")
    options: ClassVar[tuple[str, ...]] = ("gc_markers",)

    def __init__(
        self, cache_dir: str | Path | None = None, limits: Limits | None = None, gc_markers: int = 1
    ) -> None:
        if gc_markers < 0:
            raise InvalidArgument(
                f"opencode gc_markers {gc_markers}: expected 0 (the engine's default) or more"
            )
        super().__init__(cache_dir, limits)
        self.gc_markers = gc_markers

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
            # a tuning of its JavaScript engine (module doc): nothing opencode sends or does changes
            **({"BUN_JSC_numberOfGCMarkers": str(self.gc_markers)} if self.gc_markers else {}),
        }
