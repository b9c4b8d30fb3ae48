"""mini-swe-agent (PyPI `mini-swe-agent`): Chat Completions through litellm, never streaming.

It runs from its own venv (made from the system Python, so sandboxes can run it). litellm is
kept offline: the cost map is the bundled one (`LITELLM_LOCAL_MODEL_COST_MAP`) and cost tracking
never fails a call to an unknown model. `-c mini.yaml` is its bundled default config, and later
`-c key=value` overrides point it at the proxy and cap its steps. Every reply must contain a
`bash` tool call; the run ends when the agent runs `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`.
"""

from __future__ import annotations

from typing import ClassVar

from clawgym.harnesses.base import HarnessAdapter, InstallSpec, Limits, ProtocolName, RunContext


class MiniSweAgent(HarnessAdapter):
    name: ClassVar[str] = "mini-swe-agent"
    protocol: ClassVar[ProtocolName] = "openai_chat"
    install_spec: ClassVar[InstallSpec] = InstallSpec("pip", "mini-swe-agent", "2.4.6", bin="mini")
    default_limits: ClassVar[Limits] = Limits(timeout_s=900.0, max_turns=30)

    def command(self, instruction: str, ctx: RunContext) -> list[str]:
        argv = [
            self.executable(),
            "-y",
            "--exit-immediately",
            "-m",
            f"openai/{ctx.model}",
            "-c",
            "mini.yaml",
            "-c",
            f"model.model_kwargs.api_base={ctx.v1}",
        ]
        if self.limits.max_turns:
            argv += ["-c", f"agent.step_limit={self.limits.max_turns}"]
        return [*argv, "-t", instruction]

    def env(self, ctx: RunContext) -> dict[str, str]:
        return {
            **super().env(ctx),
            "OPENAI_API_KEY": ctx.token,
            "MSWEA_CONFIGURED": "true",
            "MSWEA_COST_TRACKING": "ignore_errors",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        }
