"""`clawgym train -c run.yaml` through the real CLI, embedded: PPO this time (a value head, GAE over
the tree), with an evaluation every step through the harness it trains with, and the report."""

import json
import os
import sqlite3

import pytest

pytestmark = pytest.mark.slow


def test_train_runs_ppo_embedded_with_periodic_evaluation_and_writes_the_report(
    clawgym, run_config, tmp_path
):
    config = run_config(
        proxy={"max_new_tokens": 12},
        trainer={"run_name": "ppo", "steps": 2, "group_size": 2, "groups_per_step": 2,
                 "algorithm": {"name": "ppo", "lr": 1e-4}, "keep_checkpoints": 1, "sweep_interval_s": 1.0},
        evaluation={"tasks": 2, "every_steps": 1},
    )  # fmt: skip
    done = clawgym("train", "-c", str(config), "--run-dir", str(tmp_path / "run"), "--json")
    assert done.returncode == 0, f"clawgym train failed:\n{done.stdout}\n{done.stderr}"
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["mode"] == "embedded" and summary["steps"] == 2, f"two embedded steps: {summary}"
    # sync: the engine and the trainer take turns, each on every core (1 thread on a busy machine)
    assert 1 <= summary["torch_threads"] <= (os.cpu_count() or 1), summary["torch_threads"]
    with sqlite3.connect(tmp_path / "store.db") as db:
        metrics = [json.loads(m) for (m,) in db.execute("SELECT metrics FROM checkpoints ORDER BY version")]
        evals = [v for (v,) in db.execute("SELECT version FROM evals ORDER BY version")]
    assert len(metrics) == 2 and all("value_loss" in m for m in metrics), "PPO trained a value head each step"
    assert evals == [0, 1, 2], f"evaluated before, after step 1 (every_steps: 1) and at the end: {evals}"
    report = (tmp_path / "run" / "report.md").read_text()
    assert report.count("| reference | mini |") == 3, "the report lists the three evaluations"


def test_train_with_a_bad_config_fails_with_the_field_name(clawgym, run_config):
    config = run_config(trainer={"group_size": 0})
    done = clawgym("train", "-c", str(config))
    assert done.returncode == 2, f"a bad config is a usage error:\n{done.stdout}\n{done.stderr}"
    assert "trainer.group_size" in done.stdout + done.stderr, "the error names the field"


def test_run_log_at_info_keeps_steps_evaluations_and_checkpoints_without_per_request_lines(
    clawgym, run_config, tmp_path
):
    """run.log at INFO is for a person: each step, evaluation and checkpoint, and warnings. The
    orchestrator's health check of the proxy (one per rollout) and the proxy's acknowledgement of
    each recorded call repeat per request, so they are DEBUG records (`clawgym.log_noise`)."""
    config = run_config(
        proxy={"max_new_tokens": 8},
        trainer={"run_name": "logs", "steps": 2, "group_size": 2, "groups_per_step": 1, "keep_checkpoints": 1},
        evaluation={"tasks": 1},
    )  # fmt: skip
    done = clawgym("train", "-c", str(config), "--run-dir", str(tmp_path / "run"), "--json")
    assert done.returncode == 0, f"clawgym train failed:\n{done.stdout}\n{done.stderr}"
    lines = (tmp_path / "run" / "run.log").read_text().splitlines()
    info = [line for line in lines if " INFO " in line or " WARNING " in line]
    assert not [line for line in info if "/healthz" in line], "health checks are not INFO lines"
    assert not [line for line in info if "clawgym.proxy.acks" in line], (
        "per-call acknowledgements are not INFO"
    )
    steps = [line for line in info if "clawgym.trainer.loop: step " in line]
    assert [line.split(": step ")[1].split(":")[0] for line in steps] == ["1", "2"], (
        f"one line per step:\n{steps}"
    )
    checkpoints = [line for line in info if "clawgym.trainer.loop: checkpoint " in line]
    assert len(checkpoints) == 2 and "consumed 1 groups" in checkpoints[0], (
        f"one line per checkpoint:\n{checkpoints}"
    )
    evals = [line for line in info if "clawgym.evaluation.runner: evaluation of policy " in line]
    assert [e.split("evaluation of policy ")[1].split(" ")[0] for e in evals] == ["v0", "v2"], (
        f"the evaluations before and after training:\n{evals}"
    )
    assert "reference: Pass@1 " in evals[0], evals[0]


def test_a_training_runs_evaluations_are_listed_under_it_in_the_browser(clawgym, run_config, tmp_path):
    """The evaluation runner's eval runs name the run they evaluated, and its rows on that run name
    their eval run: the browser's run page lists both evaluations of a real short run, with Pass@1."""
    from clawgym.browse.pages import run_page, runs_page
    from clawgym.store.sql import SqlStore

    config = run_config(
        proxy={"max_new_tokens": 8},
        trainer={"run_name": "evals", "steps": 1, "group_size": 2, "groups_per_step": 1, "keep_checkpoints": 1},
        evaluation={"tasks": 1},
    )  # fmt: skip
    done = clawgym("train", "-c", str(config), "--run-dir", str(tmp_path / "run"), "--json")
    assert done.returncode == 0, f"clawgym train failed:\n{done.stdout}\n{done.stderr}"
    store = SqlStore(f"sqlite:///{tmp_path / 'store.db'}", writable=False)
    try:
        runs = runs_page(store)["runs"]
        (training,) = [r for r in runs if r["config"].get("kind") != "eval"]
        assert sorted(r["of_run"] or "" for r in runs) == ["", training["id"], training["id"]], runs
        evaluations = run_page(store, training["id"])["evaluations"]
    finally:
        store.close()
    assert [(e["version"], list(e["pass_at_1"])) for e in evaluations] == [
        (0, ["reference"]),
        (1, ["reference"]),
    ], f"the evaluations before and after the step, each with its Pass@1: {evaluations}"
