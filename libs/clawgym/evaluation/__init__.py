"""Evaluation: Pass@k (unbiased estimator) with confidence intervals, and the runner that measures it.

`passk` holds the statistics (pure functions of per-task counts); `compare` reads a before/after
pair of evaluations; `select` chooses the tasks; `runner.evaluate` runs an evaluation as rollouts
on any `RolloutService` and records it in the store.
"""

from clawgym.evaluation.compare import Comparison, compare
from clawgym.evaluation.passk import (
    PassAtK,
    TaskCounts,
    bootstrap_interval,
    estimate,
    paired_difference,
    pass_at_k,
    wilson_interval,
)
from clawgym.evaluation.runner import EvalResult, EvalSpec, HarnessEval, eval_run, evaluate, summarize

__all__ = [
    "Comparison",
    "EvalResult",
    "EvalSpec",
    "HarnessEval",
    "PassAtK",
    "TaskCounts",
    "bootstrap_interval",
    "compare",
    "estimate",
    "eval_run",
    "evaluate",
    "paired_difference",
    "pass_at_k",
    "summarize",
    "wilson_interval",
]
