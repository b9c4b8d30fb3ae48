"""The run report's data: per-step training metrics, evaluations, stage timings, a summary.

Owns gathering and shaping what a report shows, not drawing it (`plots.py`) or writing it
(`markdown.py`). Step metrics come from the store's checkpoints (each registered checkpoint carries
its step's metrics, `clawgym.trainer.loop`), so a report can be rebuilt from the store alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clawgym.store.interface import TrajectoryStore


@dataclass(frozen=True)
class EvalPoint:
    """Pass@k of one harness at one policy version (one row of an evaluation)."""

    version: int
    harness: str
    suite: str
    pass_at: dict[int, float]
    ci95: dict[int, tuple[float, float]]
    tasks: int
    samples: int
    mean_reward: float = 0.0
    infra_failures: int = 0
    label: str = ""  # "before", "after", "step 10", …
    # hybrid tasks: {"judged", "mean_code", "mean_rubric", "not_judged", "judge_failures"} or None
    hybrid: dict[str, Any] | None = None

    @classmethod
    def from_metrics(cls, metrics: dict[str, Any], harness: str, label: str = "") -> EvalPoint:
        """From the JSON `HarnessEval.metrics` writes (what `record_eval` stores)."""
        ks = sorted(
            int(k.split("@")[1]) for k in metrics if k.startswith("pass@") and not k.endswith("_ci95")
        )
        return cls(
            version=int(metrics["version"]),
            harness=harness,
            suite=str(metrics["suite"]),
            pass_at={k: float(metrics[f"pass@{k}"]) for k in ks},
            ci95={k: tuple(metrics[f"pass@{k}_ci95"]) for k in ks},  # type: ignore[misc]
            tasks=int(metrics["tasks"]),
            samples=int(metrics["samples"]),
            mean_reward=float(metrics.get("mean_reward", 0.0)),
            infra_failures=int(metrics.get("infra_failures", 0)),
            label=label,
            hybrid=metrics.get("hybrid") or None,
        )


@dataclass
class RunReport:
    """Everything a run report shows."""

    title: str
    run_id: str
    settings: dict[str, Any] = field(default_factory=dict)  # what was run (model, harnesses, steps…)
    steps: list[dict[str, Any]] = field(default_factory=list)  # one metrics dict per step, in order
    evals: list[EvalPoint] = field(default_factory=list)
    stages: dict[str, float] = field(default_factory=dict)  # stage name → seconds
    summary: dict[str, Any] = field(default_factory=dict)  # the headline figures (quickstart's JSON)
    notes: list[str] = field(default_factory=list)

    def harnesses(self) -> list[str]:
        """Harnesses seen in step metrics or evaluations, sorted."""
        names = {k.split("/")[1] for s in self.steps for k in s if k.startswith("harness/")}
        return sorted(names | {e.harness for e in self.evals})


def steps_from_store(store: TrajectoryStore, run_id: str) -> list[dict[str, Any]]:
    """The step metrics of every registered checkpoint of the run, by version (with `step` set)."""
    return [
        {**c.metrics, "step": c.step} for c in sorted(store.list_checkpoints(run_id), key=lambda c: c.version)
    ]


def series(steps: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one metric, skipping steps that lack it."""
    xs, ys = [], []
    for s in steps:
        value = s.get(key)
        if isinstance(value, int | float):
            xs.append(int(s.get("step", len(xs) + 1)))
            ys.append(float(value))
    return xs, ys
