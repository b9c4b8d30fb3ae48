"""`clawgym train` never evaluates a run on tasks it trains on: it refuses such a config before any
model loads (the real CLI in a subprocess), and a suite `tasks import` split passes."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from clawgym.config import ClawgymConfig
from clawgym.run import refuse_trained_evaluation

DATA = Path(__file__).resolve().parents[1] / "tasks" / "data"


def unsplit_suite(folder: Path) -> Path:
    """ClawGym tasks with no split of their own (copies of one sample under new ids)."""
    for task_id in ("greet-1", "greet-2", "notes-1", "notes-2", "sum-1", "sum-2"):
        shutil.copytree(DATA / "clawgym" / "write-greeting", folder / task_id)
        entry = folder / task_id / "data_entry.json"
        entry.write_text(json.dumps({**json.loads(entry.read_text()), "id": task_id}))
    return folder


def test_train_refuses_evaluation_task_ids_that_overlap_trainer_tasks_before_loading_a_model(
    clawgym, run_config, tmp_path
):
    config = run_config(
        trainer={"tasks": ["mini-train-write_word-00", "mini-train-write_word-01"], "steps": 1},
        evaluation={"task_ids": ["mini-test-write_word-00", "mini-train-write_word-01"]},
    )
    started = time.monotonic()
    done = clawgym("train", "-c", str(config), timeout=120)
    seconds = time.monotonic() - started
    out = done.stdout + done.stderr
    assert done.returncode == 2, f"an evaluation that overlaps training is refused: {out}"
    line = next((x for x in out.splitlines() if "clawgym train:" in x), "")
    assert "1 of the 2 evaluated tasks" in line and "(mini-train-write_word-01)" in line, (
        f"one line names the overlapping task: {out}"
    )
    assert "evaluation.task_ids and trainer.tasks disjoint" in line, f"and says how to fix it: {out}"
    assert not (tmp_path / "store.db").exists() and not (tmp_path / "checkpoints").exists(), (
        "refused before the runtime (store, model) opened"
    )
    assert not (tmp_path / "runs").exists(), "a refused start leaves no run folder"
    assert seconds < 45, f"refused at once, not after loading a model: {seconds:.1f} s"


def test_train_refuses_a_suite_without_a_split_and_an_imported_split_passes(clawgym, run_config, tmp_path):
    """Unsplit, the suite's every task is both trained and evaluated on: refused, pointing at
    `tasks import`; once imported (split by family), the same run's tasks are apart."""
    suite = unsplit_suite(tmp_path / "unsplit")
    done = clawgym("train", "-c", str(run_config(trainer={"suite": str(suite), "steps": 1})), timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    assert "evaluated tasks of suite" in out and "clawgym tasks import SRC" in out, out

    imported = clawgym("tasks", "import", str(suite), "--name", "split", "--root", str(tmp_path / "suites"))
    assert imported.returncode == 0, imported.stdout + imported.stderr
    cfg = ClawgymConfig(trainer={"suite": str(tmp_path / "suites" / "split")})
    refuse_trained_evaluation(cfg)  # raises when an evaluated task is trained on
    unsplit = ClawgymConfig(trainer={"suite": str(suite)}, evaluation={"at_start": False, "at_end": False})
    refuse_trained_evaluation(unsplit)  # a run that evaluates nothing has nothing to keep apart
