"""`clawgym tasks list|import|check` on the sample tasks, run in real local sandboxes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from clawgym_app.cli import app

DATA = Path(__file__).parent / "data"
runner = CliRunner()


def json_lines(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def test_check_passes_the_oracle_and_fails_nop_on_every_supported_sample(tmp_path):
    """The oracle passes and nop fails for each runnable task; unsupported ones are errors with a reason."""
    result = runner.invoke(app, ["tasks", "check", str(DATA), "--json", "--root", str(tmp_path)])
    lines = json_lines(result.output)
    assert lines, f"no JSON output: {result.output}"
    summary = lines[-1]
    assert summary == {"tasks": 9, "ok": 6, "oracle_passed": 5, "nop_failed": 6, "errors": 3, "broken": 0}, (
        f"5 tasks have solutions, 6 are runnable, 3 need services/images: {result.output}"
    )
    per_task = {line["task"]: line for line in lines[:-1]}
    assert per_task["make-notes-dir"]["ok"] and per_task["make-notes-dir"]["oracle_reward"] is None, (
        "a task without a solution is checked with nop only"
    )
    assert "needs services" in per_task["needs-postgres"]["error"], "unsupported tasks say why"
    assert "not a package install" in per_task["build-sum-tool"]["error"], (
        "a Dockerfile that builds things is for the docker backend (tests/sandbox/test_docker_backend.py)"
    )
    assert per_task["csv-total"]["oracle_reward"] == 1.0, "TB tests ran with the sandbox's pytest"
    assert per_task["json-config"]["oracle_reward"] == 1.0, (
        "the provisioned pip package was importable in the sandbox"
    )
    assert result.exit_code == 1, "unsupported tasks make the check fail overall"


def test_check_reports_a_task_whose_oracle_fails(tmp_path):
    """A broken verifier (the oracle's correct answer scores 0) is caught, not passed."""
    task = tmp_path / "suite" / "broken"
    shutil.copytree(DATA / "clawgym" / "write-greeting", task)
    (task / "solution" / "solve.sh").write_text("echo 'Hello, Bob!' > greeting.txt\n")
    result = runner.invoke(app, ["tasks", "check", str(tmp_path / "suite"), "--json"])
    summary = json_lines(result.output)[-1]
    assert summary == {"tasks": 1, "ok": 0, "oracle_passed": 0, "nop_failed": 1, "errors": 0, "broken": 0}, (
        result.output
    )
    assert result.exit_code == 1, "a failing check exits non-zero"


def test_import_copies_a_suite_that_list_then_shows(tmp_path):
    root = tmp_path / "suites"
    result = runner.invoke(
        app,
        ["tasks", "import", str(DATA / "harbor"), "--format", "harbor", "--name", "h", "--root", str(root)],
    )
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (root / "h").iterdir()) == [
        "count-words",
        "custom-image",
        "json-config",
        "suite.json",
    ]
    suites = json_lines(runner.invoke(app, ["tasks", "list", "--json", "--root", str(root)]).output)
    assert [s["suite"] for s in suites] == ["mini", "h"], "the bundled suite, then the imported one"
    assert suites[1]["tasks"] == "3" and suites[1]["format"] == "harbor"
    tasks = json_lines(runner.invoke(app, ["tasks", "list", "h", "--json", "--root", str(root)]).output)
    assert [t["task"] for t in tasks] == ["count-words", "custom-image", "json-config"]
    again = runner.invoke(app, ["tasks", "import", str(DATA / "harbor"), "--name", "h", "--root", str(root)])
    assert again.exit_code == 2 and "exists" in again.output, "importing over a suite needs --replace"


def suite_with_a_broken_task(folder: Path) -> Path:
    """A ClawGym task that checks fine beside a Terminal-Bench task whose test file is missing."""
    shutil.copytree(DATA / "clawgym" / "write-greeting", folder / "write-greeting")
    broken = folder / "no-tests"
    shutil.copytree(DATA / "terminal-bench" / "csv-total", broken)
    (broken / "tests" / "test_outputs.py").unlink()
    return folder


def test_check_reports_a_broken_task_and_still_checks_the_others_and_prints_the_summary(tmp_path):
    """One task that does not load is one error line (its folder and missing file), counted as
    broken; the good task is still checked in a real sandbox (oracle passes, nop fails)."""
    suite = suite_with_a_broken_task(tmp_path / "suite")
    result = runner.invoke(app, ["tasks", "check", str(suite), "--json"])
    *lines, summary = json_lines(result.output)
    assert summary == {"tasks": 2, "ok": 1, "oracle_passed": 1, "nop_failed": 1, "errors": 0, "broken": 1}, (
        result.output
    )
    per_task = {line["task"]: line for line in lines}
    assert per_task["write-greeting"]["ok"] and per_task["write-greeting"]["oracle_reward"] == 1.0
    assert per_task["write-greeting"]["nop_reward"] == 0.0, "nop fails the good task"
    broken = per_task["no-tests"]
    assert broken["broken"] and not broken["ok"], broken
    assert "no-tests/tests: no test_*.py files" in broken["error"], "the error names the task and the file"
    assert result.exit_code == 1, "a broken task makes the check fail"

    text = runner.invoke(app, ["tasks", "check", str(suite)])
    out = text.output.splitlines()
    assert any(line.startswith("BROKEN no-tests") and "no test_*.py files" in line for line in out), (
        text.output
    )
    assert any(line.startswith("ok write-greeting") for line in out), text.output
    assert out[-1] == "summary: tasks 2, ok 1, oracle_passed 1, nop_failed 1, errors 0, broken 1", (
        f"the summary ends the output: {text.output}"
    )
    assert text.exit_code == 1


def test_task_ids_with_markup_are_printed_as_written_and_the_summary_follows(tmp_path):
    """Task ids are data: `x[/green]` (a rich MarkupError, no summary) and `[bold]nope` (its brackets
    eaten) print as written in `tasks check` and `tasks list`."""
    suite = tmp_path / "suite"
    for folder, task_id in (("passes", "x[/green]"), ("fails", "[bold]nope")):
        shutil.copytree(DATA / "clawgym" / "write-greeting", suite / folder)
        entry = suite / folder / "data_entry.json"
        entry.write_text(json.dumps({**json.loads(entry.read_text()), "id": task_id}))
    (suite / "fails" / "solution" / "solve.sh").write_text("echo 'Hello, Bob!' > greeting.txt\n")
    result = runner.invoke(app, ["tasks", "check", str(suite)])
    out = result.output.splitlines()
    assert "ok x[/green]" in out and "FAIL [bold]nope" in out, f"{result.output} {result.exception!r}"
    assert out[-1] == "summary: tasks 2, ok 1, oracle_passed 1, nop_failed 2, errors 0, broken 0", (
        result.output
    )
    assert result.exit_code == 1, "the failing task fails the check"

    listed = runner.invoke(app, ["tasks", "list", str(suite)])
    assert listed.exit_code == 0, f"{listed.output} {listed.exception!r}"
    assert "x[/green]" in listed.output and "[bold]nope" in listed.output, listed.output


def test_check_task_checks_only_the_named_tasks(tmp_path):
    """--task (repeatable) checks those tasks alone: the good one in a real sandbox, the broken one by
    its folder's name; an id the suite lacks is refused before anything runs."""
    suite = suite_with_a_broken_task(tmp_path / "suite")
    shutil.copytree(DATA / "clawgym" / "sum-scores", suite / "sum-scores")
    result = runner.invoke(app, ["tasks", "check", str(suite), "--task", "write-greeting", "--json"])
    *lines, summary = json_lines(result.output)
    assert [line["task"] for line in lines] == ["write-greeting"], result.output
    assert summary == {"tasks": 1, "ok": 1, "oracle_passed": 1, "nop_failed": 1, "errors": 0, "broken": 0}, (
        result.output
    )
    assert result.exit_code == 0, "only the good task was checked"

    both = runner.invoke(
        app, ["tasks", "check", str(suite), "--task", "no-tests", "--task", "sum-scores", "--json"]
    )
    *lines, summary = json_lines(both.output)
    assert sorted(line["task"] for line in lines) == ["no-tests", "sum-scores"], both.output
    assert summary["tasks"] == 2 and summary["broken"] == 1, both.output

    missing = runner.invoke(app, ["tasks", "check", str(suite), "--task", "write-greeting", "--task", "nope"])
    assert missing.exit_code == 2 and "no task 'nope'" in missing.output, missing.output
    assert "summary" not in missing.output, "nothing is checked when a named task is not in the suite"
