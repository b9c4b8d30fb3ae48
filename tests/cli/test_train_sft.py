"""`clawgym train` with SFT through the real CLI, embedded, on a tiny dataset: an export folder of a
captured run (`tests/export/capture.py`: two rollouts through the real proxy, one passed).

1. algorithm sft: every step trains the passed rollout's tokens; the checkpoints, the store's step
   records, the report and TensorBoard hold each SFT step.
2. a warm start: one SFT step, then GRPO on toy rollouts in the same run folder, continued with
   --resume; the report lists both stages' steps."""

import json
import sqlite3
from pathlib import Path

import pytest

from clawgym.export import export_run
from clawgym.store.sql import SqlStore
from tests.cli.conftest import tensorboard_scalars
from tests.export.capture import capture_run

pytestmark = pytest.mark.slow
NO_EVALUATION = {"at_start": False, "at_end": False}  # Pass@k is `clawgym train`'s own tests' business


@pytest.fixture
def demonstrations(tmp_path: Path) -> Path:
    """A captured run exported as JSONL: the demonstrations' folder."""
    store = SqlStore(f"sqlite:///{tmp_path / 'captured.db'}")
    try:
        run = capture_run(store)
        export_run(store, run.run_id, "jsonl", tmp_path / "demos")
    finally:
        store.close()
    return tmp_path / "demos"


def steps_of(db: Path) -> list[dict]:
    with sqlite3.connect(db) as conn:
        return [json.loads(m) for (m,) in conn.execute("SELECT metrics FROM checkpoints ORDER BY version")]


def test_train_with_algorithm_sft_trains_an_export_folders_passed_rollouts(
    clawgym, run_config, demonstrations, tmp_path
):
    config = run_config(
        trainer={"run_name": "sft", "steps": 2, "rollout_source": "toy", "algorithm": {"name": "sft", "lr": 1e-3},
                 "sft": {"source": str(demonstrations), "min_reward": 1.0, "groups_per_step": 1}, "mode": "async"},
        evaluation=NO_EVALUATION, tracking={"tensorboard": True},
    )  # fmt: skip
    done = clawgym("train", "-c", str(config), "--run-dir", str(tmp_path / "run"), "--json")
    assert done.returncode == 0, f"clawgym train failed:\n{done.stdout}\n{done.stderr}"
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["steps"] == 2
    steps = steps_of(tmp_path / "store.db")
    # async: the engine and the trainer each get a share of the cores, but no rollout runs in an SFT step
    assert all(s["torch_threads"] == 2 * summary["torch_threads"] for s in steps), (
        f"SFT steps compute on both shares: {[s['torch_threads'] for s in steps]}, a share {summary['torch_threads']}"
    )
    assert [s["stage"] for s in steps] == ["sft", "sft"], "two SFT steps registered as checkpoints"
    assert all(s["rollouts"] == 1 for s in steps), "min_reward 1.0 keeps the one passed rollout"
    assert steps[1]["loss"] < steps[0]["loss"], (
        f"the passed rollout's NLL falls: {[s['loss'] for s in steps]}"
    )
    assert sorted(p.name for p in (tmp_path / "checkpoints" / "sft").glob("v*")) == ["v000001", "v000002"]
    report = (tmp_path / "run" / "report.md").read_text()
    assert "| stage |" in report and report.count("| sft |") == 2, "the report's step table names the stage"
    scalars = tensorboard_scalars(tmp_path / "run" / "tensorboard")
    assert sorted(scalars["loss"]) == [1, 2] and sorted(scalars["sft_tokens"]) == [1, 2], "tracked per step"


def test_train_warm_starts_with_sft_then_grpo_in_one_run_and_resumes(
    clawgym, run_config, demonstrations, tmp_path
):
    config = run_config(
        trainer={"run_name": "warm", "steps": 2, "rollout_source": "toy", "group_size": 2, "groups_per_step": 1,
                 "algorithm": {"lr": 1e-3}, "sft": {"source": str(demonstrations), "steps": 1}},
        evaluation=NO_EVALUATION,
    )  # fmt: skip
    run = tmp_path / "run"
    done = clawgym("train", "-c", str(config), "--run-dir", str(run), "--json")
    assert done.returncode == 0, f"clawgym train failed:\n{done.stdout}\n{done.stderr}"
    again = clawgym("train", str(run), "--resume", "--steps", "3", "--json")
    assert again.returncode == 0, f"clawgym train --resume failed:\n{again.stdout}\n{again.stderr}"
    steps = steps_of(tmp_path / "store.db")
    assert [s.get("stage") for s in steps] == ["sft", None, None], "version 1 is SFT, 2 and 3 are GRPO"
    assert steps[0]["rollouts"] == 2 and all("reward" in s for s in steps[1:]), "RL steps trained rollouts"
    assert sorted(p.name for p in (tmp_path / "checkpoints" / "warm").glob("v*")) == [
        "v000001",
        "v000002",
        "v000003",
    ]
    report = (run / "report.md").read_text()
    assert report.count("| sft |") == 1 and "| 3 |" in report, "the report covers both stages"
