"""The scalar names a run's trackers log: one list, the one the store, the report and Prometheus use.

A step's scalars are its record's keys (`clawgym.trainer.metrics.STEP_KEYS`: `loss`, `approx_kl`,
`reward`, …, the Prometheus gauge `clawgym_trainer_<key>`), plus the per-harness ones
(`harness/<harness>/reward`, …), exactly as `report.json` lists each step. An evaluation's are
`eval/<harness>/pass@<k>` and `eval/<harness>/mean_reward`, logged at the evaluated version, as
`report.json` lists its `evals`. Not here: writing them (`writers`).
"""

from __future__ import annotations

from typing import Any

from clawgym.trainer.metrics import STEP_KEYS


def step_scalars(metrics: dict[str, Any]) -> dict[str, float]:
    """The numeric step keys and per-harness figures of one step's metrics (a checkpoint's)."""
    return {
        k: float(v)
        for k, v in metrics.items()
        if (k in STEP_KEYS or k.startswith("harness/")) and isinstance(v, int | float) and not isinstance(v, bool)
    }


def eval_scalars(harness: str, pass_at: dict[int, float], mean_reward: float) -> dict[str, float]:
    """One harness's evaluation: Pass@k for each k and the mean reward."""
    out = {f"eval/{harness}/pass@{k}": float(v) for k, v in sorted(pass_at.items())}
    out[f"eval/{harness}/mean_reward"] = float(mean_reward)
    return out
