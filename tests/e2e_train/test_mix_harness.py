"""Mix-harness training: one run over the same suite through two harnesses (reference + mini-swe-agent),
GRPO groups per (task, harness), both recorded and both trained on, and both evaluated at the end.

mini-swe-agent installs into the harness cache through its adapter on first use. The tiny policy
rarely writes a valid mini-swe-agent action; that is fine: the test is about what is recorded and
trained, not about solving tasks.
"""

import io
import sqlite3

import pytest
from rich.console import Console

from clawgym.config import ClawgymConfig
from clawgym.harnesses.registry import get_harness
from clawgym.report import steps_from_store
from clawgym_app.runtime import Runtime
from clawgym_app.training_run import run_with_progress

pytestmark = [pytest.mark.slow, pytest.mark.harness]
SETTINGS = {"reference": {"max_turns": 1, "max_tokens": 16}, "mini-swe-agent": {"max_turns": 2}}


def test_a_two_harness_run_records_and_trains_groups_of_both_harnesses(learnable_run, tmp_path, one_thread):
    get_harness("mini-swe-agent").install()  # the pinned PyPI release into ~/.cache/clawgym/harnesses
    cfg = ClawgymConfig(
        **learnable_run(
            run_name="mix",
            steps=2,
            group_size=2,
            groups_per_step=4,
            harnesses=[{"name": "reference", "weight": 1.0}, {"name": "mini-swe-agent", "weight": 1.0}],
            rollout_timeout_s=600.0,
            evaluation={"samples": 1, "split": "test", "at_start": False},
            harness_settings=SETTINGS,
        )
    )
    with Runtime.open(cfg) as rt:
        outcome = run_with_progress(rt, tmp_path / "report", Console(file=io.StringIO()))
        steps = steps_from_store(rt.store, outcome.run_id)
    trained = {k.split("/")[1] for s in steps for k in s if k.startswith("harness/")}
    assert trained == {"reference", "mini-swe-agent"}, (
        f"the steps trained on groups of both harnesses: {trained}"
    )
    with sqlite3.connect(tmp_path / "store.db") as db:
        rows = db.execute(
            "SELECT r.harness, count(DISTINCT r.group_id), count(c.id) FROM rollouts r "
            "LEFT JOIN calls c ON c.rollout_id = r.id WHERE r.run_id = ? GROUP BY r.harness",
            (outcome.run_id,),
        ).fetchall()
    recorded = {harness: (groups, calls) for harness, groups, calls in rows}
    assert set(recorded) == {"reference", "mini-swe-agent"}, f"groups of both harnesses recorded: {recorded}"
    assert all(calls > 0 for _, calls in recorded.values()), f"each harness's calls were captured: {recorded}"
    final = outcome.evals[-1]
    assert final.label == "after" and set(final.result.harnesses) == {"reference", "mini-swe-agent"}, (
        "the final evaluation goes through every harness the run trains with"
    )
    report = (tmp_path / "report" / "report.md").read_text()
    assert "### Per harness" in report and "mini-swe-agent reward" in report, "the report splits by harness"
