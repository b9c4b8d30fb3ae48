"""Codex CLI (`@openai/codex`): OpenAI Responses only, pointed at the proxy by `$CODEX_HOME/config.toml`.

The model name must be one Codex does not know: a known name (gpt-*, o3, …) switches Codex to a
private dialect without `tools`. The token is read from the env variable the provider names.
Update checks, analytics and plugins are off; there is no turn cap, the sandbox's timeout bounds
the run. Codex reads a prompt from stdin too, so stdin is empty.
"""

from __future__ import annotations

import json
from typing import ClassVar

from clawgym.harnesses.base import HarnessAdapter, InstallSpec, ProtocolName, RunContext, under

TOKEN_VAR = "CLAWGYM_API_KEY"


class Codex(HarnessAdapter):
    name: ClassVar[str] = "codex"
    protocol: ClassVar[ProtocolName] = "openai_responses"
    install_spec: ClassVar[InstallSpec] = InstallSpec("npm", "@openai/codex", "0.171.0", bin="codex")

    def command(self, instruction: str, ctx: RunContext) -> list[str]:
        return [
            self.executable(),
            "exec",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
            instruction,
        ]

    def env(self, ctx: RunContext) -> dict[str, str]:
        return {**super().env(ctx), "CODEX_HOME": under(ctx.home, ".codex"), TOKEN_VAR: ctx.token}

    def config_files(self, ctx: RunContext) -> dict[str, str]:
        toml = f"""model = {json.dumps(ctx.model)}
model_provider = "clawgym"
check_for_update_on_startup = false

[model_providers.clawgym]
name = "clawgym"
base_url = {json.dumps(ctx.v1)}
env_key = "{TOKEN_VAR}"
wire_api = "responses"

[analytics]
enabled = false

[features]
plugins = false
remote_plugin = false
"""
        return {under(ctx.home, ".codex", "config.toml"): toml}
