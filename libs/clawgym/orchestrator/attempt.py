"""One attempt of one rollout: harness ready, proxy up, sandbox, workspace, harness, verifier.

The one rollout pipeline: task files → harness config files → harness exec → the verifier's clean
context (HOME, /tmp and /tests emptied from outside, tests copied in and sealed: `tasks.verify`) →
verifier, with state callbacks (running, verifying), failure classification at each stage,
metrics, and a sandbox that is destroyed whatever happens, cancellation included. It knows nothing
of the store, retries or limits (the runner's). `run_task` runs one attempt outside a batch
(`clawgym tasks check`, benches, tests). A harness that exits non-zero or times out is a task
outcome: the verifier still runs and decides the reward. A sandbox that ends by itself once the
harness ran (`SandboxDied`: an agent that OOM-kills its container's PID 1) is one too, reward 0
with nothing scored: otherwise a failing agent could turn its failure into a retried
infrastructure failure, never scored and never trained on.

A hybrid task (one with a rubric) is then scored by the LLM judge, if one is configured: the files
its rules name are read before the sandbox goes, the judge is asked once the sandbox is destroyed
(its own timeout and retries, `clawgym.judge`), and the reward is the weighted sum
(`judge.hybrid`). A judge that fails raises `JudgeFailed` (kind `judge`) carrying its prompt and
answer. Without a judge the rubric is not judged and the code checks alone give the reward.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from clawgym.harnesses.base import HarnessAdapter, Launch, RunContext
from clawgym.judge import evidence as judge_evidence
from clawgym.judge.client import Judge, JudgeOutcome
from clawgym.judge.hybrid import NOT_JUDGED, combine
from clawgym.orchestrator import failures
from clawgym.orchestrator.failures import InfraFailure, JudgeFailed, classify
from clawgym.orchestrator.metrics import OrchestratorMetrics
from clawgym.sandbox.interface import (
    ExecResult,
    ImageBuild,
    Resources,
    Sandbox,
    SandboxBackend,
    SandboxDied,
    SandboxSpec,
)
from clawgym.tasks.model import Task, TaskImage
from clawgym.tasks.suites import suite_of
from clawgym.tasks.verify import Verdict, prepare_workspace, verify

log = logging.getLogger(__name__)

PROXY_OK_CACHE_S = 5.0  # a proxy that answered is not asked again for this long (per-rollout overhead)
PROXY_RETRY_S = 1.0  # pause between two asks of a proxy that is not up
HOME = "/root"
OUTPUT_TAIL_BYTES = 4000  # of the harness's stdout and of its stderr, kept for reading
# On top of the harness's own time limit: workspace set-up, verifier, teardown.
SLACK_S = 120.0
# Backends whose sandboxes see the host's harness install cache (read-only); the others run
# images that carry their harness on PATH (`from_image`).
HOST_INSTALLS = ("local", "docker")


def sandbox_spec(
    task: Task,
    launch: Launch,
    *,
    harness: str,
    home: str = HOME,
    env: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    proxy_url: str = "",
) -> SandboxSpec:
    """The sandbox a run of `launch` on `task` needs: the task's paths writable, room for the verifier,
    and the proxy (`proxy_url`, as this process reaches it) the one address it can reach."""
    return SandboxSpec(
        workdir=task.workdir,
        mounts=tuple(m for m in task.sandbox_mounts() if m != home),
        home=home,
        env=dict(env or {}),
        timeout_s=launch.timeout_s + task.verifier.timeout_s + SLACK_S,
        network="proxy",
        proxy_url=proxy_url,
        labels=dict(labels or {}),
        harness=harness,
    )


@dataclass
class AttemptPlan:
    """Everything one attempt needs, decided by the runner."""

    task: Task
    adapter: HarnessAdapter
    token: str
    proxy_url: str
    model: str
    labels: Mapping[str, str]
    env: Mapping[str, str] = field(default_factory=dict)  # provisioned packages (PYTHONPATH, PATH)
    image: str = ""
    resources: Resources | None = None
    # the text of the rollout's last model answer, from the store (the judge's evidence)
    final_message: Callable[[], Awaitable[str]] | None = None


@dataclass(frozen=True)
class AttemptResult:
    """A task outcome: the harness ran and the verifier decided."""

    verdict: Verdict
    harness_exit_code: int
    harness_timed_out: bool
    harness_output: str  # the tails of its stdout and stderr
    timings: dict[str, float]
    # hybrid tasks: where the reward came from (`judge.hybrid`) and the judge's outcome, if asked
    breakdown: dict[str, Any] | None = None
    judgment: JudgeOutcome | None = None
    harness_stderr: str = ""  # the tail of its stderr alone (recorded with the rollout)


def died_verdict(died: SandboxDied) -> Verdict:
    """The verdict of an attempt whose sandbox ended by itself once the harness ran: reward 0, and
    nothing scored (no verifier can run there, no judge is asked)."""
    return Verdict(0.0, False, f"{died}; the attempt fails closed", failed_closed=True)


def image_fields(task: Task, image: TaskImage) -> dict[str, object]:
    """The `SandboxSpec` fields that run a task in its own image: built (named by its suite and id,
    without network if the suite is imported), or prebuilt by name."""
    if image.dockerfile is not None and image.context is not None:
        suite, imported = suite_of(task.source_dir)
        build = ImageBuild(str(image.dockerfile), str(image.context), task.id, suite, imported)
        return {"build": build}
    return {"image": image.name}


def from_image(adapter: HarnessAdapter, launch: Launch) -> Launch:
    """The launch for a sandbox whose image carries the harness on PATH (deploy/docker/sandbox-*),
    not in the host's install cache: the CLI is called by its name instead of its cache path."""
    spec = adapter.install_spec
    if spec.manager == "none" or not launch.argv or launch.argv[0] != adapter.executable():
        return launch
    return dataclasses.replace(launch, argv=(spec.bin, *launch.argv[1:]))


class ProxyProbe:
    """Answers "is the proxy up?" with GET /healthz; a success is remembered for a few seconds.
    A proxy that is down or not ready is asked again for up to `wait_s` (a pod starting or being
    replaced takes seconds; failing at once would spend a rollout's retries on it)."""

    def __init__(self, timeout_s: float, wait_s: float = 0.0) -> None:
        self.timeout_s = timeout_s
        self.wait_s = wait_s
        self._ok_until: dict[str, float] = {}
        # one TLS context for every check: a client made without one loads the CA bundle (~28 ms)
        self._tls = httpx.create_ssl_context(trust_env=False)

    async def check(self, url: str) -> None:
        """Returns when `url` answers /healthz with 200 within `wait_s`; InfraFailure(proxy) otherwise."""
        deadline = time.monotonic() + self.wait_s
        while True:
            try:
                return await self._check_once(url)
            except InfraFailure:
                if time.monotonic() + PROXY_RETRY_S > deadline:
                    raise
            await asyncio.sleep(PROXY_RETRY_S)

    async def _check_once(self, url: str) -> None:
        if self._ok_until.get(url, 0.0) > time.monotonic():
            return
        try:
            async with httpx.AsyncClient(timeout=self.timeout_s, trust_env=False, verify=self._tls) as client:
                reply = await client.get(url.rstrip("/") + "/healthz")
        except httpx.HTTPError as e:
            raise InfraFailure(failures.PROXY, f"{url} is unreachable: {type(e).__name__}: {e}") from e
        if reply.status_code != 200:
            raise InfraFailure(
                failures.PROXY, f"{url}/healthz answered {reply.status_code}: {reply.text[:200]}"
            )
        self._ok_until[url] = time.monotonic() + PROXY_OK_CACHE_S


class AttemptRunner:
    """Runs attempts on one sandbox backend."""

    def __init__(
        self,
        backend: SandboxBackend,
        metrics: OrchestratorMetrics,
        probe: ProxyProbe,
        install_harnesses: bool = True,
        judge: Judge | None = None,
    ) -> None:
        self.backend, self.metrics, self.probe = backend, metrics, probe
        self.install_harnesses = install_harnesses
        self.judge = judge  # None: hybrid tasks are scored by their code checks alone

    async def run(
        self,
        plan: AttemptPlan,
        on_running: Callable[[str], Awaitable[None]],
        on_verifying: Callable[[], Awaitable[None]],
    ) -> AttemptResult:
        """The attempt; raises InfraFailure for anything but a task outcome (and CancelledError)."""
        timings: dict[str, float] = {}
        started = time.monotonic()
        adapter, task = plan.adapter, plan.task
        # a backend that runs the task's own image: its Dockerfile is not replayed on the host
        own_image = task.image if self.backend.task_images else None
        if own_image is not None:
            task = task.in_own_image()
        await self._ensure_installed(adapter)
        if adapter.protocol != "none":
            await self.probe.check(plan.proxy_url)
        # the harness is told where the proxy is from inside its sandbox (local: a relay on loopback)
        inside = self.backend.sandbox_proxy_url(plan.proxy_url)
        ctx = RunContext(
            workdir=task.workdir, home=HOME, proxy_url=inside, token=plan.token, model=plan.model
        )
        try:
            launch = adapter.launch(task.instruction, ctx, task)
        except Exception as e:
            raise classify(e, failures.HARNESS_START) from e
        if self.backend.name not in HOST_INSTALLS:
            launch = from_image(adapter, launch)
        spec = sandbox_spec(
            task, launch, harness=adapter.name, env=plan.env, labels=plan.labels, proxy_url=plan.proxy_url
        )
        resources = plan.resources or spec.resources
        floor = plan.adapter.limits.min_memory_mb
        if floor and resources.memory_mb < floor:  # a harness that cannot start below it (OpenClaw)
            resources = dataclasses.replace(resources, memory_mb=floor)
        spec = dataclasses.replace(spec, image=plan.image, resources=resources)
        if own_image is not None:
            spec = dataclasses.replace(spec, **image_fields(task, own_image))

        t0 = time.monotonic()
        try:
            sandbox: Sandbox = await self.backend.create(spec)
        except Exception as e:
            raise classify(e, failures.SANDBOX) from e
        timings["sandbox_start_s"] = time.monotonic() - t0
        self.metrics.sandbox_start.labels(self.backend.name).observe(timings["sandbox_start_s"])
        active = self.metrics.active_sandboxes.labels(self.backend.name, adapter.name)
        active.inc()
        try:
            await on_running(sandbox.id)
            t0 = time.monotonic()
            try:
                await prepare_workspace(task, sandbox)
                for path, data in launch.files.items():
                    await sandbox.put_file(path, data, mode=0o755 if path.endswith((".sh", ".py")) else 0o644)
            except Exception as e:
                raise classify(e, failures.SANDBOX) from e
            timings["setup_s"] = time.monotonic() - t0
            t0, died = time.monotonic(), None
            try:
                result = await sandbox.exec(
                    list(launch.argv),
                    env={**task.env, **plan.env, **launch.env},
                    cwd=launch.cwd,
                    timeout_s=launch.timeout_s,
                    stdin=launch.stdin,
                )
            except SandboxDied as e:  # the harness's doing: its outcome (module docstring)
                died = e
                result = ExecResult(137, b"", f"{e}\n".encode(), time.monotonic() - t0)
            except Exception as e:
                raise classify(e, failures.SANDBOX) from e
            timings["harness_s"] = result.duration_s
            tail = OUTPUT_TAIL_BYTES
            output = (
                (result.stdout[-tail:] + b"\n" + result.stderr[-tail:]).decode("utf-8", "replace").strip()
            )
            if result.exit_code in failures.NOT_EXECUTED and not result.timed_out:
                raise InfraFailure(
                    failures.HARNESS_START,
                    f"{adapter.name} could not be executed (exit {result.exit_code}): {output[-600:]}",
                )
            t0 = time.monotonic()
            try:
                if died is None:
                    await on_verifying()
                    verdict = await verify(task, sandbox, env=plan.env)
                else:
                    verdict = died_verdict(died)
            except SandboxDied as e:  # it ended during the harness (or under the verifier): as above
                verdict = died_verdict(e)
            except Exception as e:
                raise classify(e, failures.SANDBOX) from e
            timings["verify_s"] = time.monotonic() - t0
            evidence = None
            if task.rubric is not None and self.judge is not None and not verdict.failed_closed:
                try:
                    evidence = await judge_evidence.collect(task, sandbox, output, self.judge.cfg)
                except Exception as e:
                    raise classify(e, failures.SANDBOX) from e
                if plan.final_message is not None:
                    try:
                        final = await plan.final_message()
                    except Exception as e:
                        raise classify(e, failures.INTERNAL) from e
                    evidence = dataclasses.replace(
                        evidence, final_message=judge_evidence.cut(final, self.judge.cfg.max_file_chars)
                    )
        finally:
            t0 = time.monotonic()
            await self._destroy(sandbox)
            active.dec()
            timings["destroy_s"] = time.monotonic() - t0
        breakdown, judgment = None, None
        if task.rubric is not None:
            verdict, breakdown, judgment = await self._score_rubric(task, verdict, evidence, timings)
        timings["total_s"] = time.monotonic() - started
        stderr = result.stderr[-OUTPUT_TAIL_BYTES:].decode("utf-8", "replace")
        return AttemptResult(
            verdict, result.exit_code, result.timed_out, output, timings, breakdown, judgment, stderr
        )

    async def _score_rubric(
        self,
        task: Task,
        code: Verdict,
        evidence: judge_evidence.Evidence | None,
        timings: dict[str, float],
    ) -> tuple[Verdict, dict[str, Any], JudgeOutcome | None]:
        """The hybrid verdict; JudgeFailed when the judge was asked and gave no score."""
        if evidence is None or self.judge is None or task.rubric is None:
            _, breakdown = combine(task, code, None)
            if code.failed_closed:  # the harness tampered with /tests: nothing is scored, no judge asked
                breakdown["rubric_status"] = f"{NOT_JUDGED}: the code checks failed closed"
            return code, breakdown, None
        t0 = time.monotonic()
        outcome = await self.judge.judge(task.instruction, task.rubric, evidence)
        timings["judge_s"] = time.monotonic() - t0
        self.metrics.judge_calls.labels("ok" if outcome.ok else "failed").inc()
        if not outcome.ok:
            raise JudgeFailed(
                f"the rubric judge ({outcome.model} at {outcome.base_url}) failed after "
                f"{outcome.attempts} tries: {outcome.error} (code checks: reward {code.reward:.4f})",
                outcome,
                code.reward,
            )
        verdict, breakdown = combine(task, code, outcome)
        return verdict, breakdown, outcome

    async def _destroy(self, sandbox: Sandbox) -> None:
        """Destroys the sandbox even while this attempt is being cancelled (again), then returns."""

        async def destroy() -> None:
            try:
                await sandbox.destroy()
            except Exception:
                log.exception("destroying sandbox %s failed (reap deletes it at the next start)", sandbox.id)

        task = asyncio.ensure_future(destroy())
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            await task  # a cancel completes only once the sandbox is gone
            raise

    async def _ensure_installed(self, adapter: HarnessAdapter) -> None:
        """Local and docker sandboxes run the host's cached install; kubernetes images carry their harness."""
        if self.backend.name not in HOST_INSTALLS or adapter.is_installed():
            return
        if not self.install_harnesses:
            raise InfraFailure(
                failures.INSTALL,
                f"{adapter.name} is not installed in {adapter.install_dir} (install_harnesses is off)",
            )
        try:
            await asyncio.to_thread(adapter.install)
        except Exception as e:
            raise classify(e, failures.INSTALL) from e


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
    proxy_check_timeout_s: float = 10.0,
    judge: Judge | None = None,
) -> AttemptResult:
    """One attempt of `adapter` on `task` outside any batch or store: the orchestrator's pipeline.
    `judge` scores hybrid tasks' rubrics; without one their code checks alone decide."""

    async def nothing(*_: object) -> None:
        return None

    runner = AttemptRunner(
        backend, OrchestratorMetrics(), ProxyProbe(proxy_check_timeout_s), judge=judge
    )
    plan = AttemptPlan(task, adapter, token, proxy_url, model, labels or {}, env or {})
    return await runner.run(plan, nothing, nothing)
