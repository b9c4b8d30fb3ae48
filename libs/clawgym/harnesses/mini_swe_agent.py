"""mini-swe-agent (PyPI `mini-swe-agent`): Chat Completions through litellm, never streaming.

It runs from its own venv (made from the system Python, so sandboxes can run it). litellm is
kept offline: the cost map is the bundled one (`LITELLM_LOCAL_MODEL_COST_MAP`) and cost tracking
never fails a call to an unknown model. Two of its own bundled configs, by `mode`:

- `tools` (default): `-c mini.yaml`, a `bash` function tool that every reply must call;
- `text`: `-c mini_textbased.yaml` with its `litellm_textbased` model, one fenced
  `mswea_bash_command` block per reply: the form it ships for models without tool calling, and
  the one a small policy can write. `fences` widens the fence languages its parser takes (its
  `model.action_regex`): `[mswea_bash_command, bash]` also takes the ```bash block that
  mini-swe-agent 1.x asked for and that small chat models write by habit; its prompt is unchanged.

Later `-c key=value` overrides point it at the proxy and cap its steps and reply length. The run
ends when the agent runs `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` or reaches its step cap.

`client` picks what sends its requests: `litellm` (its default, as people run it) or `direct`, its
OpenRouter model classes pointed at the proxy (`mini_swe_agent_client.py.tmpl`, written into the
run's HOME and named by import path with `--model-class`): the same agent, prompts and parsing (the
body adds OpenRouter's `usage` field, which the proxy ignores), without litellm's import (~2.6 s
of CPU per rollout, most of a rollout's CPU on 2 cores). It waits for a reply as litellm does
(`REQUEST_TIMEOUT`, 600 s unless set), not their 60 s, after which each retry would abort a call
still queued on a busy engine.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import ClassVar

from clawgym.errors import InvalidArgument
from clawgym.harnesses.base import HarnessAdapter, InstallSpec, Limits, ProtocolName, RunContext, under

MODES = {  # mode → its bundled config, and the model class that parses replies (its own pick if None)
    "tools": ("mini.yaml", None),
    "text": ("mini_textbased.yaml", "litellm_textbased"),
}
CLIENTS = ("litellm", "direct")
DIRECT_CLASSES = {"tools": "DirectToolModel", "text": "DirectTextModel"}  # client direct: per mode
CLIENT_MODULE = "clawgym_mswea_client"
CLIENT_SOURCE = Path(__file__).with_name("mini_swe_agent_client.py.tmpl")


class MiniSweAgent(HarnessAdapter):
    name: ClassVar[str] = "mini-swe-agent"
    protocol: ClassVar[ProtocolName] = "openai_chat"
    install_spec: ClassVar[InstallSpec] = InstallSpec("pip", "mini-swe-agent", "2.4.6", bin="mini")
    default_limits: ClassVar[Limits] = Limits(timeout_s=900.0, max_turns=30)
    options: ClassVar[tuple[str, ...]] = ("mode", "max_tokens", "fences", "client")

    def __init__(
        self,
        cache_dir: str | Path | None = None,
        limits: Limits | None = None,
        mode: str = "tools",
        max_tokens: int | None = None,
        fences: list[str] | None = None,
        client: str = "litellm",
    ) -> None:
        if mode not in MODES:
            raise InvalidArgument(f"mini-swe-agent mode {mode!r}: expected one of {', '.join(MODES)}")
        if client not in CLIENTS:
            raise InvalidArgument(f"mini-swe-agent client {client!r}: expected one of {', '.join(CLIENTS)}")
        if fences is not None and mode != "text":
            raise InvalidArgument("mini-swe-agent fences: only its text mode parses fenced commands")
        if fences is not None and (not fences or not all(re.fullmatch(r"[\w-]+", f) for f in fences)):
            raise InvalidArgument(f"mini-swe-agent fences {fences!r}: expected fence languages such as bash")
        super().__init__(cache_dir, limits)
        self.mode, self.max_tokens, self.fences, self.client = mode, max_tokens, fences, client

    def command(self, instruction: str, ctx: RunContext) -> list[str]:
        config, model_class = MODES[self.mode]
        direct = self.client == "direct"
        if direct:
            model_class = f"{CLIENT_MODULE}.{DIRECT_CLASSES[self.mode]}"
        argv = [
            self.executable(),
            "-y",
            "--exit-immediately",
            "-m",
            ctx.model if direct else f"openai/{ctx.model}",  # litellm reads the provider off the name
            "-c",
            config,
            "-c",
            f"model.model_kwargs.api_base={ctx.v1}",
        ]
        if model_class:
            argv += ["--model-class", model_class]
        if self.limits.max_turns:
            argv += ["-c", f"agent.step_limit={self.limits.max_turns}"]
        if self.max_tokens:
            argv += ["-c", f"model.model_kwargs.max_tokens={self.max_tokens}"]
        if self.fences:  # its own regex with the languages swapped (a raw value: mini parses no JSON here)
            argv += ["-c", f"model.action_regex=```(?:{'|'.join(self.fences)})\\s*\\n(.*?)\\n```"]
        return [*argv, "-t", instruction]

    def env(self, ctx: RunContext) -> dict[str, str]:
        return {
            **super().env(ctx),
            "OPENAI_API_KEY": ctx.token,
            "MSWEA_CONFIGURED": "true",
            "MSWEA_COST_TRACKING": "ignore_errors",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            **({"PYTHONPATH": self._client_dir(ctx)} if self.client == "direct" else {}),
        }

    def config_files(self, ctx: RunContext) -> dict[str, str]:
        if self.client != "direct":
            return {}
        return {under(self._client_dir(ctx), f"{CLIENT_MODULE}.py"): CLIENT_SOURCE.read_text()}

    @staticmethod
    def _client_dir(ctx: RunContext) -> str:
        return under(ctx.home, ".clawgym-mswea")
