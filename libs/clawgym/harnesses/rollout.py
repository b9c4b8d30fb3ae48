"""Runs one harness on one task in one sandbox: workspace in, harness, verifier, reward out.

This is the sequence the orchestrator and `clawgym tasks check` share. It knows the order
(task files → harness config files → harness exec → tests copied in → verifier) and nothing of
the store or the proxy: the caller registers the rollout, passes its token, and records the result.
An exception here (SandboxFailed, a failed install) is an infrastructure failure; a harness that
exits non-zero or times out is not: the verifier still runs and decides the reward.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from clawgym.harnesses.base import HarnessAdapter, Launch, RunContext
from clawgym.sandbox.interface import ExecResult, SandboxBackend, SandboxSpec
from clawgym.tasks.model import Task
from clawgym.tasks.verify import DEFAULT_PYTEST, SandboxLike, Verdict, prepare_workspace, verify

HOME = "/root"
# On top of the harness's own time limit: workspace set-up, verifier, teardown.
SLACK_S = 120.0


@dataclass(frozen=True)
class RolloutOutcome:
    """How one harness run on one task ended."""

    task_id: str
    harness: str
    verdict: Verdict
    harness_exit_code: int
    harness_timed_out: bool
    harness_output: str  # tail of stdout + stderr
    duration_s: float
    timings: dict[str, float] = field(default_factory=dict)


def sandbox_spec(
    task: Task,
    launch: Launch,
    *,
    harness: str,
    home: str = HOME,
    env: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    network: str = "proxy",
) -> SandboxSpec:
    """The sandbox a run of `launch` on `task` needs: the task's paths writable, room for the verifier."""
    return SandboxSpec(
        workdir=task.workdir,
        mounts=tuple(m for m in task.sandbox_mounts() if m != home),
        home=home,
        env=dict(env or {}),
        timeout_s=launch.timeout_s + task.verifier.timeout_s + SLACK_S,
        network=network,  # type: ignore[arg-type]
        labels=dict(labels or {}),
        harness=harness,
    )


async def run_in_sandbox(
    adapter: HarnessAdapter,
    task: Task,
    sandbox: SandboxLike,
    launch: Launch,
    *,
    env: Mapping[str, str] | None = None,
    pytest: tuple[str, ...] = DEFAULT_PYTEST,
) -> RolloutOutcome:
    """Workspace, harness, verifier, in a sandbox made from `sandbox_spec(task, launch, ...)`."""
    started = time.monotonic()
    timings: dict[str, float] = {}
    await prepare_workspace(task, sandbox)
    for path, data in launch.files.items():
        await sandbox.put_file(path, data, mode=0o755 if path.endswith((".sh", ".py")) else 0o644)
    timings["setup_s"] = time.monotonic() - started
    result: ExecResult = await sandbox.exec(
        list(launch.argv),
        env={**task.env, **(env or {}), **launch.env},
        cwd=launch.cwd,
        timeout_s=launch.timeout_s,
        stdin=launch.stdin,
    )
    timings["harness_s"] = result.duration_s
    verify_started = time.monotonic()
    verdict = await verify(task, sandbox, pytest=pytest, env=env)
    timings["verify_s"] = time.monotonic() - verify_started
    output = (result.stdout[-4000:] + b"\n" + result.stderr[-4000:]).decode("utf-8", "replace").strip()
    return RolloutOutcome(
        task.id,
        adapter.name,
        verdict,
        result.exit_code,
        result.timed_out,
        output,
        time.monotonic() - started,
        timings,
    )


async def run_task(
    adapter: HarnessAdapter,
    task: Task,
    backend: SandboxBackend,
    *,
    proxy_url: str = "",
    token: str = "",
    model: str = "",
    env: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    pytest: tuple[str, ...] = DEFAULT_PYTEST,
) -> RolloutOutcome:
    """Creates a sandbox for the run, runs it, and destroys the sandbox whatever happens."""
    ctx = RunContext(workdir=task.workdir, home=HOME, proxy_url=proxy_url, token=token, model=model)
    launch = adapter.launch(task.instruction, ctx, task)
    network = "proxy" if proxy_url else "none"
    sandbox = await backend.create(
        sandbox_spec(task, launch, harness=adapter.name, env=env, labels=labels, network=network)
    )
    try:
        return await run_in_sandbox(adapter, task, sandbox, launch, env=env, pytest=pytest)
    finally:
        await sandbox.destroy()
