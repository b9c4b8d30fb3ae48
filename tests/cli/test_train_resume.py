"""`clawgym train --resume`: a killed run continues from its newest checkpoint, once asked to.

The run is a real `clawgym train` subprocess (embedded: SQLite store, tiny model, the reference
harness), SIGKILLed as soon as the store registered its first checkpoint, then resumed to the end.
"""

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import time
from collections import Counter

import pytest

from tests.cli.conftest import CLAWGYM, tensorboard_scalars

pytestmark = pytest.mark.slow

STEPS = 3


def _checkpoints(db_path) -> int:
    try:
        with sqlite3.connect(db_path) as db:
            return db.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
    except sqlite3.OperationalError:  # not created yet
        return 0


def test_a_killed_train_resumed_with_resume_finishes_without_training_a_group_twice(
    clawgym, run_config, tmp_path
):
    """Killed after its first checkpoint, the run refuses to restart silently; `--resume` says where
    it resumed, trains up to `trainer.steps` in all, keeps the 'before' evaluation instead of
    repeating it, consumes every group once, and reports the whole run."""
    config = run_config(
        proxy={"max_new_tokens": 12},
        trainer={"run_name": "resume", "steps": STEPS, "group_size": 2, "groups_per_step": 2,
                 "algorithm": {"lr": 1e-4}, "sweep_interval_s": 1.0},
        evaluation={"tasks": 2},
        tracking={"tensorboard": True},
    )  # fmt: skip
    db_path = tmp_path / "store.db"
    first = subprocess.Popen(
        [str(CLAWGYM), "train", "-c", str(config), "--run-dir", str(tmp_path / "run1")],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    while _checkpoints(db_path) < 1 and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    os.killpg(first.pid, signal.SIGKILL)  # the sandboxes' processes too (same session)
    first.wait(timeout=30)
    killed_at = _checkpoints(db_path)
    assert 1 <= killed_at < STEPS, (
        f"the first run must die mid-run, after its first checkpoint ({killed_at} registered):\n"
        f"{first.stdout.read()}"
    )

    again = clawgym("train", "-c", str(config), "--run-dir", str(tmp_path / "run2"))
    assert again.returncode == 2 and "--resume" in again.stdout, (
        f"training a run that has checkpoints again must refuse and point at --resume:\n{again.stdout}"
    )
    assert _checkpoints(db_path) == killed_at, "the refused run trained nothing"

    done = clawgym("train", "-c", str(config), "--run-dir", str(tmp_path / "run3"), "--resume", "--json")
    assert done.returncode == 0, f"the resumed run failed:\n{done.stdout}\n{done.stderr}"
    assert "resumed run" in done.stderr and f"at version {killed_at}" in done.stderr, (
        f"the resumed run says that it resumed, and from which version:\n{done.stderr}"
    )
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["steps"] == STEPS, f"trainer.steps is the run's total, not steps more: {summary}"
    assert "pass1_before" in summary and "pass1_after" in summary, (
        f"the summary covers the whole run (the first process's 'before' evaluation): {summary}"
    )

    with sqlite3.connect(db_path) as db:
        checkpoints = [
            (v, json.loads(m)) for v, m in db.execute("SELECT version, metrics FROM checkpoints ORDER BY version")
        ]
        consumed = dict(db.execute("SELECT id, consumed_version FROM groups WHERE consumed_version IS NOT NULL"))
        evals = [v for (v,) in db.execute("SELECT version FROM evals ORDER BY id")]
    assert [v for v, _ in checkpoints] == list(range(1, STEPS + 1)), f"one checkpoint per step: {checkpoints}"
    trained = Counter(g for _, m in checkpoints for g in m["trained_groups"])
    assert trained and max(trained.values()) == 1, f"a group was trained twice: {trained.most_common(3)}"
    for v, m in checkpoints:
        assert all(consumed.get(g) == v for g in m["trained_groups"]), (
            f"checkpoint {v}'s groups are marked consumed by it, and only by it"
        )
    assert evals == [0, STEPS], f"'before' once (the first process), 'after' once (the resumed one): {evals}"
    report = (tmp_path / "run3" / "report.md").read_text()
    assert report.count("| reference | mini |") == 2, "the resumed run's report lists both evaluations"
    logged = tensorboard_scalars(tmp_path / "run3" / "tensorboard")
    assert logged["loss"].keys() == set(range(1, STEPS + 1)), (
        f"the resumed run's TensorBoard has every step, the first process's replayed: {logged['loss']}"
    )
    assert logged["eval/reference/pass@1"].keys() == {0, STEPS}, "and both evaluations"


def test_resume_with_nothing_to_resume_is_a_clear_error(clawgym, run_config):
    config = run_config(trainer={"run_name": "fresh"})
    done = clawgym("train", "-c", str(config), "--resume")
    assert done.returncode == 2, f"--resume of a run that never started is a usage error:\n{done.stdout}"
    assert "nothing to resume" in done.stdout, f"the error says why: {done.stdout}"


@pytest.mark.parametrize(
    ("marker", "problem"),
    [("{}", "has no run_id string ({})"), ('["x"]', 'holds ["x"], not an object'), ("run 7", "is not JSON")],
    ids=["empty-object", "array", "not-json"],
)
def test_a_damaged_run_json_is_one_clear_line_naming_the_file(clawgym, run_config, tmp_path, marker, problem):
    """run.json that is not `{"run_id": …}` (a KeyError, TypeError or JSONDecodeError traceback before)
    is a usage error in one line: the file, what is wrong with it, and what to do."""
    config = run_config(trainer={"run_name": "damaged"})
    run_json = tmp_path / "checkpoints" / "damaged" / "run.json"
    run_json.parent.mkdir(parents=True)
    run_json.write_text(marker)
    done = clawgym("train", "-c", str(config), "--resume")
    assert done.returncode == 2, (
        f"a damaged run.json is a usage error, not a crash:\n{done.stdout}\n{done.stderr}"
    )
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"clawgym train: {run_json} {problem}"), done.stdout
    assert "trainer.run_id" in lines[0], f"the error says how to go on: {lines[0]}"
    assert run_json.read_text() == marker, "the file is left as it was"


def test_resume_refuses_a_run_json_of_another_configs_run_saying_how_they_differ(
    clawgym, run_config, tmp_path
):
    """The run that run.json names was created by a GRPO, full-weights config; resuming it with a PPO,
    LoRA config would load its state into another algorithm and shape: refused, naming both differences."""
    from clawgym.config import load_config
    from clawgym.store.sql import SqlStore
    from clawgym.trainer.checkpoint import resolve_run

    first = load_config(run_config(trainer={"run_name": "shared"}))
    run_id = resolve_run(SqlStore(first.store.url), first.trainer)  # what `clawgym train` records
    other = run_config(
        trainer={"run_name": "shared", "algorithm": {"name": "ppo"}, "lora": {"enabled": True}}
    )
    done = clawgym("train", "-c", str(other), "--resume", "--run-dir", str(tmp_path / "run"))
    assert done.returncode == 2, f"another config's run is not resumed:\n{done.stdout}\n{done.stderr}"
    error = next(
        (line for line in done.stdout.splitlines() if line.startswith("clawgym train:")), done.stdout
    )
    assert f"names run {run_id}, which is not this config's run" in error, error
    assert "trainer.algorithm.name is 'grpo' there, 'ppo' here" in error, error
    assert "trainer.lora.enabled is False there, True here" in error, error


def test_resume_refuses_a_run_json_copied_from_another_runs_folder(clawgym, run_config, tmp_path):
    """run.json copied into this config's checkpoint folder from another run's names a run of
    another name: refused, naming both names, instead of continuing that run here."""
    from clawgym.config import load_config
    from clawgym.store.sql import SqlStore
    from clawgym.trainer.checkpoint import resolve_run

    first = load_config(run_config(trainer={"run_name": "first"}))
    resolve_run(SqlStore(first.store.url), first.trainer)
    (tmp_path / "checkpoints" / "second").mkdir()
    shutil.copy(tmp_path / "checkpoints" / "first" / "run.json", tmp_path / "checkpoints" / "second")
    second = run_config(trainer={"run_name": "second"})
    done = clawgym("train", "-c", str(second), "--resume", "--run-dir", str(tmp_path / "run"))
    assert done.returncode == 2, f"another run's run.json is not resumed:\n{done.stdout}\n{done.stderr}"
    assert "the run is named 'first', this config's trainer.run_name is 'second'" in done.stdout, done.stdout
