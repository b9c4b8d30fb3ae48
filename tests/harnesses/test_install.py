"""Installing real harness CLIs from their registries into the cache (outside the repo, reused by CI),
and running them from inside a local sandbox, which sees the cache read-only."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from clawgym.harnesses.base import RunContext
from clawgym.harnesses.install import MARKER
from clawgym.harnesses.registry import get_harness
from clawgym.sandbox import SandboxConfig, SandboxSpec, make_sandbox_backend

pytestmark = [pytest.mark.harness, pytest.mark.slow]
CTX = RunContext(workdir="/workspace", home="/root", proxy_url="http://127.0.0.1:9", token="t", model="m")


def run_in_sandbox(tmp_path: Path, argv: list[str], env: dict[str, str]):
    cfg = SandboxConfig()
    cfg.local.root_dir = str(tmp_path / "sandboxes")

    async def go():
        backend = make_sandbox_backend(cfg)
        try:
            sandbox = await backend.create(SandboxSpec(network="none", timeout_s=300))
            return await sandbox.exec(argv, env=env, timeout_s=240)
        finally:
            await backend.close()

    return asyncio.run(go())


def test_an_npm_harness_installs_once_with_its_pinned_node_and_runs_in_a_sandbox(tmp_path):
    adapter = get_harness("qwen-code")
    folder = adapter.install()
    assert folder == Path.home() / ".cache/clawgym/harnesses/qwen-code-0.24.4", (
        "installs go to the shared cache"
    )
    assert adapter.is_installed(), "the marker names the pinned requirement"
    marker_mtime = (folder / MARKER).stat().st_mtime
    adapter.install()
    assert (folder / MARKER).stat().st_mtime == marker_mtime, "a second install is a no-op"
    result = run_in_sandbox(tmp_path, [adapter.executable(), "--version"], adapter.env(CTX))
    assert result.exit_code == 0, (
        f"qwen should run in the sandbox under the pinned Node: {result.stderr[-1000:]!r}"
    )
    assert result.stdout.decode().strip() == "0.24.4", "the pinned version runs"


def test_mini_swe_agent_installs_into_a_venv_of_the_system_python_and_runs_in_a_sandbox(tmp_path):
    adapter = get_harness("mini-swe-agent")
    folder = adapter.install()
    assert (folder / "venv" / "bin" / "mini").is_file() and adapter.is_installed()
    result = run_in_sandbox(tmp_path, [adapter.executable(), "--help"], adapter.env(CTX))
    assert result.exit_code == 0, f"mini should start in the sandbox: {result.stderr[-1500:]!r}"
    assert b"--task" in result.stdout or b"-t" in result.stdout, "its help lists the task option"
