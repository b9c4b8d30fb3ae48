"""`clawgym eval` through the real CLI: the oracle passes every sampled task, nop none, Pass@k with
intervals per harness, and the results are in the store."""

import json
import sqlite3

import pytest

pytestmark = pytest.mark.slow


def test_eval_with_oracle_and_nop_validates_the_suite_and_stores_both_results(clawgym, run_config, tmp_path):
    """Suite validation: oracle Pass@1 = Pass@2 = 1, nop 0, no infrastructure failure, two eval rows."""
    config = run_config()
    done = clawgym(
        "eval", "-c", str(config), "-H", "oracle", "-H", "nop", "--tasks", "5", "--k", "2", "--json"
    )
    assert done.returncode == 0, f"clawgym eval failed:\n{done.stdout}\n{done.stderr}"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    oracle, nop = result["harnesses"]["oracle"], result["harnesses"]["nop"]
    assert (oracle["tasks"], oracle["samples"]) == (5, 10), "5 tasks × 2 samples (k = 2 needs 2)"
    assert oracle["pass@1"] == 1.0 and oracle["pass@2"] == 1.0, f"the oracle solves every task: {oracle}"
    assert nop["pass@1"] == 0.0 and nop["pass@2"] == 0.0, f"doing nothing solves none: {nop}"
    assert oracle["infra_failures"] == 0 and nop["infra_failures"] == 0, "no sandbox failed"
    low, high = oracle["pass@1_ci95"]
    assert 0.5 < low < 1.0 and high == pytest.approx(1.0), (
        f"a 95% interval below a perfect score: {low, high}"
    )
    with sqlite3.connect(tmp_path / "store.db") as db:
        rows = db.execute(
            "SELECT harness, suite, json_extract(metrics, '$.\"pass@1\"') FROM evals"
        ).fetchall()
    assert sorted(rows) == [("nop", "mini", 0.0), ("oracle", "mini", 1.0)], f"both results are stored: {rows}"


def test_eval_of_an_unknown_checkpoint_version_fails_with_a_clear_message(clawgym, run_config):
    done = clawgym("eval", "-c", str(run_config()), "-H", "nop", "--tasks", "1", "--checkpoint", "7")
    assert done.returncode == 2, f"a bad --checkpoint is a usage error:\n{done.stdout}\n{done.stderr}"
    assert "--checkpoint V needs the config's run" in done.stdout + done.stderr, done.stdout + done.stderr
