"""Harnesses: one adapter per harness (install, headless command, env/config pointing at the proxy,
protocol, limits), the pseudo-harnesses `oracle` and `nop`, the standalone reference agent, and
`rollout`, which runs one harness on one task in one sandbox.

>>> adapter = get_harness("claude-code")
>>> adapter.install()                                   # ~/.cache/clawgym/harnesses/claude-code-2.1.332
>>> launch = adapter.launch(task.instruction, RunContext(workdir, home, proxy_url, token, model), task)
"""

from clawgym.harnesses.base import HarnessAdapter, InstallSpec, Launch, Limits, RunContext
from clawgym.harnesses.registry import get_harness, harness_names

__all__ = ["HarnessAdapter", "InstallSpec", "Launch", "Limits", "RunContext", "get_harness", "harness_names"]
