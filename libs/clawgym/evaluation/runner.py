"""The eval runner: Pass@k of the served policy through harnesses on a task suite, over any RolloutService.

Owns running an evaluation as rollouts (one group of `samples` per (task, harness)) and turning
their outcomes into per-task counts and Pass@k (`passk.py`). It does not choose the policy: the
rollouts go through whatever proxy and engine the rollout service points at, so "evaluate
checkpoint V" means "make the engine serve V first" (the app does that).

Eval rollouts are registered under a run of their own (`eval_run`), never the training run, so a
trainer watching its run's `groups.ready` stream never trains on evaluation groups. The results
are recorded against `record_run_id` (`record_eval`), one row per harness: the training run for a
training run's own evaluations, the eval run itself for `clawgym eval`. An eval run's config names
the run it evaluates (`of_run`: the browser lists it under that run) and the version, and each
recorded row names its eval run (`eval_run`); each evaluation ends with one INFO line (the run's
log keeps it).

Every model call of an evaluation must have been served by the version evaluated (the version
recorded per call and per generated token): an evaluation that saw another version is refused
(`FailedPrecondition` naming the call), never reported as that version's Pass@1.

A rollout that ended without a task outcome (an infrastructure failure after its retries, or a
cancel) counts as a sample that did not pass, and is counted in `infra_failures` so a broken
sandbox is never mistaken for a weak policy.
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from clawgym.errors import FailedPrecondition, InvalidArgument
from clawgym.evaluation.passk import PassAtK, TaskCounts, estimate
from clawgym.orchestrator.interface import Batch, RolloutRequest, RolloutService, RolloutStatus
from clawgym.records import EvalRecord
from clawgym.store.interface import TrajectoryStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvalSpec:
    """What to evaluate: tasks of a suite × harnesses, `samples` rollouts each, Pass@k for each k."""

    suite: str
    task_ids: Sequence[str]
    harnesses: Sequence[str] = ("reference",)
    samples: int = 1
    ks: Sequence[int] = (1,)

    def validate(self) -> None:
        if not self.task_ids:
            raise InvalidArgument("an evaluation needs at least one task")
        if not self.harnesses:
            raise InvalidArgument("an evaluation needs at least one harness")
        if self.samples < 1:
            raise InvalidArgument(f"samples must be >= 1, got {self.samples}")
        bad = [k for k in self.ks if k < 1 or k > self.samples]
        if bad:
            raise InvalidArgument(f"pass@k needs 1 <= k <= samples ({self.samples}); got k={bad}")


@dataclass
class HarnessEval:
    """One harness's results: per-task counts, Pass@k, mean reward, failures."""

    harness: str
    counts: list[TaskCounts]
    pass_at: dict[int, PassAtK]
    mean_reward: float
    infra_failures: int
    rewards: dict[str, list[float]] = field(default_factory=dict)  # task id → rewards of its samples
    # hybrid tasks' rollouts: where their rewards came from (None when the harness ran none)
    hybrid: dict[str, float | int | None] | None = None

    def metrics(self, suite: str, version: int) -> dict:
        """The JSON recorded with `record_eval` (and written into reports)."""
        return {
            "suite": suite,
            "version": version,
            "tasks": len(self.counts),
            "samples": sum(t.n for t in self.counts),
            "mean_reward": self.mean_reward,
            "infra_failures": self.infra_failures,
            **{f"pass@{k}": p.value for k, p in self.pass_at.items()},
            **{f"pass@{k}_ci95": list(p.ci95) for k, p in self.pass_at.items()},
            "ci_method": {str(k): p.method for k, p in self.pass_at.items()},
            "per_task": {t.task_id: [t.n, t.c] for t in self.counts},
            **({"hybrid": self.hybrid} if self.hybrid else {}),
        }

    @classmethod
    def from_metrics(cls, harness: str, metrics: dict) -> HarnessEval:
        """Back from what `metrics` recorded (a resumed run's earlier evaluations); the per-sample
        rewards are not recorded, so `rewards` is empty."""
        counts = [TaskCounts(t, int(n), int(c)) for t, (n, c) in metrics["per_task"].items()]
        methods = metrics.get("ci_method", {})
        ks = sorted(int(k.split("@")[1]) for k in metrics if k.startswith("pass@") and not k.endswith("_ci95"))
        pass_at = {
            k: PassAtK(k, float(metrics[f"pass@{k}"]), tuple(metrics[f"pass@{k}_ci95"]), len(counts),
                       sum(t.n for t in counts), str(methods.get(str(k), "")))
            for k in ks
        }  # fmt: skip
        return cls(
            harness, counts, pass_at, float(metrics.get("mean_reward", 0.0)), int(metrics.get("infra_failures", 0))
        )


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def hybrid_summary(finals: Sequence[RolloutStatus]) -> dict[str, float | int | None] | None:
    """The code and rubric parts of one harness's hybrid rewards: their means over the judged
    rollouts, how many were scored without a judge, and how many the judge failed (no reward)."""
    code, rubric, not_judged, judge_failed = [], [], 0, 0
    for s in finals:
        if s.state == "failed" and s.failure == "judge" and not s.retrying:
            judge_failed += 1
        elif s.state == "finished" and s.breakdown:
            if s.breakdown.get("rubric") is None:
                not_judged += 1
            else:
                code.append(float(s.breakdown["code"]))
                rubric.append(float(s.breakdown["rubric"]))
    if not (code or not_judged or judge_failed):
        return None
    return {
        "judged": len(rubric),
        "mean_code": _mean(code),
        "mean_rubric": _mean(rubric),
        "not_judged": not_judged,
        "judge_failures": judge_failed,
    }


@dataclass
class EvalResult:
    """An evaluation of one policy version: one `HarnessEval` per harness."""

    suite: str
    version: int
    harnesses: dict[str, HarnessEval]
    eval_run_id: str
    seconds: float = 0.0


def recorded_results(records: Sequence[EvalRecord]) -> list[EvalResult]:
    """A run's recorded evaluations (`list_evals`) as results, one per (version, suite) in recorded
    order; their `eval_run_id` and `seconds` were not recorded (empty, 0)."""
    results: dict[tuple[int, str], EvalResult] = {}
    for r in records:
        result = results.setdefault((r.version, r.suite), EvalResult(r.suite, r.version, {}, ""))
        result.harnesses[r.harness] = HarnessEval.from_metrics(r.harness, r.metrics)
    return list(results.values())


def eval_run(store: TrajectoryStore, name: str, config: dict | None = None) -> str:
    """A fresh run to register evaluation rollouts under (see the module doc); returns its id."""
    return store.create_run(f"{name}-eval-{uuid.uuid4().hex[:6]}", {"kind": "eval", **(config or {})}).id


def check_served_version(store: TrajectoryStore, finals: Sequence[RolloutStatus], version: int) -> None:
    """FailedPrecondition unless every call of these rollouts (and each of its tokens) came from `version`."""
    for s in finals:
        for call in store.list_calls(s.rollout_id):
            seen = {int(call.policy_version), *(int(v) for v in set(call.output_versions.tolist()))}
            if seen != {version}:
                raise FailedPrecondition(
                    f"evaluation of v{version} refused: call {call.seq} of rollout {s.rollout_id} "
                    f"(task {s.task_id}, harness {s.harness}) was served by version(s) {sorted(seen)}"
                )


def summarize(spec: EvalSpec, finals: Sequence[RolloutStatus], version: int, eval_run_id: str) -> EvalResult:
    """Per-task counts and Pass@k from the final status of every rollout of the batch."""
    rewards: dict[tuple[str, str], list[float]] = defaultdict(list)
    passed: dict[tuple[str, str], int] = defaultdict(int)
    infra: dict[str, int] = defaultdict(int)
    for s in finals:
        if s.retrying:
            continue  # replaced by a retry in the same slot; the retry's outcome counts
        key = (s.harness, s.task_id)
        if s.state != "finished":
            infra[s.harness] += 1
        rewards[key].append(float(s.reward or 0.0) if s.state == "finished" else 0.0)
        passed[key] += bool(s.state == "finished" and s.passed)
    results: dict[str, HarnessEval] = {}
    for harness in spec.harnesses:
        counts = [
            TaskCounts(t, len(rewards[(harness, t)]), passed[(harness, t)])
            for t in spec.task_ids
            if rewards[(harness, t)]
        ]
        if not counts:
            raise InvalidArgument(f"no rollout of harness {harness!r} ended; nothing to evaluate")
        usable = [k for k in spec.ks if all(t.n >= k for t in counts)]
        all_rewards = [r for t in spec.task_ids for r in rewards[(harness, t)]]
        results[harness] = HarnessEval(
            harness=harness,
            counts=counts,
            pass_at={k: estimate(counts, k) for k in usable},
            mean_reward=sum(all_rewards) / len(all_rewards),
            infra_failures=infra[harness],
            rewards={t: rewards[(harness, t)] for t in spec.task_ids if rewards[(harness, t)]},
            hybrid=hybrid_summary([s for s in finals if s.harness == harness]),
        )
    return EvalResult(spec.suite, version, results, eval_run_id)


async def evaluate(
    service: RolloutService,
    store: TrajectoryStore,
    spec: EvalSpec,
    *,
    version: int = 0,
    eval_run_id: str = "",
    record_run_id: str = "",
    proxy_url: str = "",
    on_status: Callable[[RolloutStatus], None] | None = None,
) -> EvalResult:
    """Runs the evaluation batch and returns Pass@k per harness; records it on `record_run_id` if given.

    `eval_run_id`: the run the rollouts are registered under (a fresh one when empty).
    `on_status`: called with every rollout transition (progress bars).
    """
    import time

    spec.validate()
    started = time.monotonic()
    evaluated = {"of_run": record_run_id, "version": version} if record_run_id else {}
    run_id = eval_run_id or eval_run(store, "clawgym", {"suite": spec.suite, **evaluated})
    batch = Batch(
        run_id=run_id,
        rollouts=[RolloutRequest(t, h, spec.samples) for h in spec.harnesses for t in spec.task_ids],
        suite=spec.suite,
        policy_version=version,
        proxy_url=proxy_url,
    )
    finals: list[RolloutStatus] = []
    async for status in service.run_rollouts(batch):
        if on_status is not None:
            on_status(status)
        if status.ended:
            finals.append(status)
    check_served_version(store, finals, version)
    result = summarize(spec, finals, version, run_id)
    result.seconds = time.monotonic() - started
    if record_run_id:
        for harness, h in result.harnesses.items():
            metrics = {**h.metrics(spec.suite, version), "eval_run": run_id}  # whose rollouts these are
            store.record_eval(record_run_id, version, spec.suite, harness, metrics)
    log.info("evaluation of policy v%d on %s (eval run %s, %d rollouts, %.0f s): %s", version, spec.suite,
             run_id, len(finals), result.seconds, _pass_line(result))  # fmt: skip
    return result


def _pass_line(result: EvalResult) -> str:
    """Per harness: Pass@1 with its interval, and the mean reward."""
    parts = []
    for name, h in result.harnesses.items():
        p = h.pass_at.get(1)
        head = f"Pass@1 {p.value:.3f} [{p.ci95[0]:.3f}, {p.ci95[1]:.3f}], " if p is not None else ""
        parts.append(f"{name}: {head}mean reward {h.mean_reward:.3f}")
    return " · ".join(parts)
