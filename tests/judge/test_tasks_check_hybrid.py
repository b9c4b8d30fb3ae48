"""`clawgym tasks check` on a hybrid ClawGym task needs no judge: the oracle passes and nop fails its
code checks in real local sandboxes, and the output says the rubric was not judged."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from clawgym_app.cli import app

FIXTURE = Path(__file__).parent / "data" / "hybrid-summary"


def test_tasks_check_scores_a_hybrid_task_by_its_code_checks_without_a_judge(tmp_path: Path) -> None:
    shutil.copytree(FIXTURE, tmp_path / "suite" / FIXTURE.name)
    result = CliRunner().invoke(app, ["tasks", "check", str(tmp_path / "suite"), "--json"])
    lines = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    assert result.exit_code == 0, result.output
    [task, summary] = lines
    assert summary == {"tasks": 1, "ok": 1, "oracle_passed": 1, "nop_failed": 1, "errors": 0, "broken": 0}
    assert task["ok"] and task["oracle_reward"] == 1.0 and task["nop_reward"] == 0.0
    assert task["oracle_breakdown"]["rubric"] is None
    assert task["oracle_breakdown"]["rubric_status"] == "not_judged: no judge configured"
