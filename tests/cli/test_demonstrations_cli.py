"""Demonstrations collected and trained on through the real CLI, embedded: `clawgym eval` with the
oracle teacher (`proxy.teacher.kind: oracle`) through the reference harness records a demonstrations
run into a folder's store, and `clawgym train` with `trainer.sft.source` set to that folder trains an
SFT step on its teacher calls."""

import json
import sqlite3

import pytest

pytestmark = pytest.mark.slow


def test_eval_with_the_oracle_teacher_collects_demonstrations_that_train_reads(clawgym, run_config, tmp_path):
    demos = tmp_path / "demos"
    demos.mkdir()
    config = run_config(evaluation={"at_start": False, "at_end": False})
    done = clawgym(
        "eval", "-c", str(config), "-H", "reference", "--split", "train", "--tasks", "2", "--json",
        "--store.url", f"sqlite:///{demos / 'clawgym.db'}", "--set", "proxy.teacher.kind=oracle",
    )  # fmt: skip
    assert done.returncode == 0, f"clawgym eval failed:\n{done.stdout}\n{done.stderr}"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["harnesses"]["reference"]["pass@1"] == 1.0, f"the oracle's answers pass: {result}"
    with sqlite3.connect(demos / "clawgym.db") as db:
        (kind,) = db.execute("SELECT json_extract(config, '$.kind') FROM runs").fetchone()
        teachers = db.execute("SELECT json_extract(response, '$._clawgym.teacher') FROM calls").fetchall()
    assert kind == "demonstrations", "a teacher's run is a demonstrations run, not an evaluation"
    assert len(teachers) >= 4 and {t for (t,) in teachers} == {"oracle"}, (
        f"every call is the oracle's: {teachers}"
    )

    train = run_config(
        trainer={"run_name": "warm", "steps": 1, "rollout_source": "toy", "algorithm": {"name": "sft", "lr": 1e-3},
                 "sft": {"source": str(demos), "teacher_only": True, "min_reward": 1.0}},
        evaluation={"at_start": False, "at_end": False},
    )  # fmt: skip
    done = clawgym("train", "-c", str(train), "--run-dir", str(tmp_path / "run"), "--json")
    assert done.returncode == 0, f"clawgym train failed:\n{done.stdout}\n{done.stderr}"
    with sqlite3.connect(tmp_path / "store.db") as db:
        (metrics,) = db.execute("SELECT metrics FROM checkpoints").fetchone()
    step = json.loads(metrics)
    assert step["stage"] == "sft" and step["rollouts"] == 2, f"one SFT step on both demonstrations: {step}"
