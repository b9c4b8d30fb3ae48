"""`clawgym eval -c runs/X/config.yaml` repeats a quickstart run's evaluation, from any folder.

One real tiny quickstart (tiny-qwen3, 4 steps, 2 held-out tasks of trained families + 1 of an unseen
family, × 2 samples, temperature 0.9, 12 tokens per reply, 2 turns at most) is made in one folder
with a relative --run-dir; every eval below runs from another folder. What an evaluation used is read back from the recorded calls in the
store: each call's temperature, the max_tokens the reference harness asked for (its reply length
from `orchestrator.harness_settings`: 256 without it), tokens generated and turns per rollout.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from tests.cli.conftest import CLAWGYM

pytestmark = pytest.mark.slow

TEMPERATURE, MAX_TOKENS, MAX_TURNS, SAMPLES = 0.9, 12, 2, 2


def _clawgym(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLAWGYM), *args], capture_output=True, text=True, timeout=600, cwd=cwd)


def _squeezed(text: str) -> str:
    return "".join(text.split())  # rich wraps long lines wherever it likes


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    """The quickstart's run folder, its config.yaml, its store and training run, and an empty folder
    to run `clawgym eval` from."""
    root = tmp_path_factory.mktemp("reproduce")
    (root / "home").mkdir()
    done = _clawgym(
        root / "home", "quickstart", "--model", "tiny-qwen3", "--steps", "4", "--eval-tasks", "2",
        "--eval-unseen-tasks", "1",
        "--eval-samples", str(SAMPLES), "--group-size", "2", "--groups-per-step", "2",
        "--max-new-tokens", str(MAX_TOKENS), "--max-turns", str(MAX_TURNS), "--temperature", str(TEMPERATURE),
        "--run-dir", "runs/q", "--json",
    )  # fmt: skip
    assert done.returncode == 0, f"the quickstart failed:\n{done.stdout}\n{done.stderr}"
    folder = root / "home" / "runs" / "q"
    db = folder / "clawgym.db"
    with sqlite3.connect(db) as c:
        [(training,)] = c.execute("SELECT id FROM runs WHERE name = 'quickstart'").fetchall()
        before = c.execute(  # the quickstart's own evaluations: eval runs in creation order, "before" first
            "SELECT id FROM runs WHERE json_extract(config, '$.kind') = 'eval' ORDER BY created_at"
        ).fetchone()[0]
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    return {"folder": folder, "config": str(folder / "config.yaml"), "db": db, "training": training,
            "before": before, "elsewhere": elsewhere}  # fmt: skip


def _calls(db: Path, run_id: str) -> list[tuple]:
    """(task id, rollout id, seq, temperature, request max_tokens, tokens generated, policy version)."""
    with sqlite3.connect(db) as c:
        return c.execute(
            "SELECT r.task_id, r.id, c.seq, c.temperature, json_extract(c.request, '$.max_tokens'), "
            "c.n_output, c.policy_version FROM calls c JOIN rollouts r ON r.id = c.rollout_id "
            "WHERE r.run_id = ?",
            (run_id,),
        ).fetchall()


def _finished_tasks(db: Path, run_id: str) -> Counter:
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT task_id FROM rollouts WHERE run_id = ? AND status = 'finished'", (run_id,))
        return Counter(t for (t,) in rows)


def _counts(db: Path) -> dict[str, int]:
    with sqlite3.connect(db) as c:
        return {
            t: c.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in ("runs", "rollouts", "calls", "evals")
        }


def test_eval_of_a_quickstart_config_from_another_folder_repeats_its_evaluation(run):
    """Same tasks and samples, every call at the quickstart's temperature, the harness asking for its
    reply length and staying within its turn cap, generation within the token cap; recorded in the
    run's own store (said so) as an eval run of its own, the training run's evaluations untouched."""
    done = _clawgym(run["elsewhere"], "eval", "-c", run["config"], "--json")
    assert done.returncode == 0, f"clawgym eval failed:\n{done.stdout}\n{done.stderr}"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert list(run["elsewhere"].iterdir()) == [], (
        "nothing is written where the command runs: the config's paths are absolute"
    )
    assert f"the config's store sqlite:///{run['db']}" == result["store"], f"it names the store: {result}"
    assert _squeezed(
        f"recorded in the config's store sqlite:///{run['db']} as eval run {result['run_id']}"
    ) in _squeezed(done.stderr), done.stderr
    assert result["of_run"] == run["training"] and result["version"] == 0, result

    assert _finished_tasks(run["db"], result["run_id"]) == _finished_tasks(run["db"], run["before"]), (
        "the same held-out tasks, each with the same number of samples, as the quickstart's evaluation"
    )
    assert set(_finished_tasks(run["db"], result["run_id"]).values()) == {SAMPLES}, "eval_samples per task"
    for label, run_id in (("quickstart", run["before"]), ("clawgym eval", result["run_id"])):
        calls = _calls(run["db"], run_id)
        assert calls, f"{label}: the evaluation made model calls"
        assert {c[3] for c in calls} == {TEMPERATURE}, (
            f"{label}: every call sampled at {TEMPERATURE}: {calls}"
        )
        assert {c[4] for c in calls} == {MAX_TOKENS}, (
            f"{label}: the harness asks max_tokens {MAX_TOKENS}: {calls}"
        )
        assert max(c[5] for c in calls) <= MAX_TOKENS, (
            f"{label}: at most {MAX_TOKENS} tokens generated per call"
        )
        turns = Counter(c[1] for c in calls)
        assert max(turns.values()) <= MAX_TURNS and max(c[2] for c in calls) < MAX_TURNS, (
            f"{label}: at most {MAX_TURNS} model calls per rollout: {turns}"
        )
    with sqlite3.connect(run["db"]) as c:
        mine = c.execute("SELECT run_id, version FROM evals WHERE run_id != ?", (run["training"],)).fetchall()
        theirs = c.execute("SELECT version FROM evals WHERE run_id = ?", (run["training"],)).fetchall()
    assert (result["run_id"], 0) in mine, "the Pass@1 row is recorded against the eval run"
    assert sorted(theirs) == [(0,), (4,)], (
        f"the training run keeps its own before/after evaluations only: {theirs}"
    )


def test_checkpoint_loads_each_kept_version_and_names_the_kept_ones_for_another(run):
    """4 steps keep v2 and v4 (the last, and every ceil(4/3) = 2nd): each evaluates with every call
    served by that version; v3 (pruned) is refused naming v2, v4 and v0 (the initial policy). (A
    version never registered: tests/evaluation/test_run_folder.py.)"""
    kept = sorted(p.name for p in (run["folder"] / "checkpoints" / "quickstart").glob("v*"))
    assert kept == ["v000002", "v000004"], f"the quickstart keeps the last and every 2nd of 4: {kept}"
    for version in (2, 4):
        done = _clawgym(run["elsewhere"], "eval", "-c", run["config"], "--checkpoint", str(version),
                        "--tasks", "1", "--samples", "1", "--json")  # fmt: skip
        assert done.returncode == 0, f"--checkpoint {version} failed:\n{done.stdout}\n{done.stderr}"
        result = json.loads(done.stdout.strip().splitlines()[-1])
        served = {c[6] for c in _calls(run["db"], result["run_id"])}
        assert result["version"] == version and served == {version}, (
            f"--checkpoint {version}: evaluated v{result['version']}, calls served by {served}"
        )
    done = _clawgym(run["elsewhere"], "eval", "-c", run["config"], "--checkpoint", "3", "--tasks", "1")
    out = _squeezed(done.stdout + done.stderr)
    assert done.returncode == 2, f"--checkpoint 3 must be refused:\n{done.stdout}\n{done.stderr}"
    assert _squeezed(f"checkpoint v3 of run {run['training']} was not kept") in out, out
    assert _squeezed("kept: v2, v4, and v0 (the initial policy)") in out, (
        f"the kept versions are named: {out}"
    )


def test_results_go_to_the_store_named_by_store_and_the_runs_store_is_left_alone(run, tmp_path):
    """--store URL: the eval run, its rollouts, calls and Pass@k are in that store (naming the evaluated
    run and version); the quickstart's store gains nothing. The checkpoint is still found through the
    config's store."""
    results = tmp_path / "results.db"
    untouched = _counts(run["db"])
    done = _clawgym(run["elsewhere"], "eval", "-c", run["config"], "--checkpoint", "4", "--tasks", "1",
                    "--samples", "1", "--store", f"sqlite:///{results}", "--json")  # fmt: skip
    assert done.returncode == 0, f"clawgym eval --store failed:\n{done.stdout}\n{done.stderr}"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["store"] == f"sqlite:///{results}", result
    assert _squeezed(f"recorded in sqlite:///{results} as eval run {result['run_id']}") in _squeezed(
        done.stderr
    )
    assert _counts(run["db"]) == untouched, "nothing is recorded in the training run's store"
    with sqlite3.connect(results) as c:
        [(kind, of_run, version)] = c.execute(
            "SELECT json_extract(config, '$.kind'), json_extract(config, '$.of_run'), "
            "json_extract(config, '$.version') "
            "FROM runs WHERE id = ?",
            (result["run_id"],),
        ).fetchall()
        evals = c.execute("SELECT run_id, version, harness FROM evals").fetchall()
    assert (kind, of_run, version) == ("eval", run["training"], 4), "the eval run names what it evaluated"
    assert evals == [(result["run_id"], 4, "reference")], f"the Pass@1 row is in the named store: {evals}"
    assert {c[6] for c in _calls(results, result["run_id"])} == {4}, "its calls, served by v4, are there too"
