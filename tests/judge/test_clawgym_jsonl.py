"""ClawGym-Bench's task rows (benchmark_data.jsonl) import as ClawGym task folders that load as their
authors wrote them: the rubric for hybrid rows, the code checker kept out of the workspace, and the
checker scoring the workspace in real sandboxes (`clawgym tasks check`: nop fails, no judge needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clawgym.tasks.clawgym_jsonl import convert_jsonl
from clawgym.tasks.loader import load_tasks
from clawgym.tasks.model import TaskFormatError
from clawgym_app.cli import app

FIXTURE = Path(__file__).parent / "data" / "hybrid-summary"
# a sub-score named "score" is one sub-score among others for ClawGym (a plain mean), not the reward
CODE_ONLY_CHECK = """import json, sys
from pathlib import Path
answer = Path(sys.argv[1]) / "output" / "answer.txt"
print("checking", answer)
print(json.dumps({"exists": float(answer.is_file()),
                  "correct": float(answer.is_file() and answer.read_text().strip() == "12"),
                  "score": 0.0}))
"""


def _rows() -> list[dict]:
    entry = json.loads((FIXTURE / "data_entry.json").read_text())
    hybrid = {
        "prompt": entry["user_query"],
        "hook_code": "python3 reward/test.py /root/.openclaw/workspace",
        "hook_lang": "bash",
        "rules": entry["rules"],
        "category": "meeting_notes",
        "macro_category": "Content & Domain",
        "input_files": [
            {"file_path": "input/notes.txt", "file_format": "txt",
             "content": (FIXTURE / "input_files" / "input" / "notes.txt").read_text()},
            {"file_path": "reward/test.py", "file_format": "py",
             "content": (FIXTURE / "reward" / "check.py").read_text()},
        ],
    }  # fmt: skip
    code_only = {
        "task_id": "sum/scores",
        "prompt": "Add 3, 4 and 5; write the total to output/answer.txt.",
        "hook_code": "python3 reward/test.py /root/.openclaw/workspace",
        "rules": None,
        "input_files": [{"file_path": "reward/test.py", "content": CODE_ONLY_CHECK}],
    }
    return [hybrid, code_only]


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_benchmark_rows_import_as_tasks_that_load_and_check_without_a_judge(tmp_path: Path) -> None:
    src = _jsonl(tmp_path / "benchmark_data.jsonl", _rows())
    root = tmp_path / "suites"
    runner = CliRunner()
    result = runner.invoke(app, ["tasks", "import", "clawgym", str(src), "--root", str(root)])
    assert result.exit_code == 0, result.output
    suite = root / "benchmark_data"
    hybrid, code_only = sorted(load_tasks(suite), key=lambda t: t.id != "task_0000")
    assert (hybrid.id, code_only.id) == ("task_0000", "sum-scores")
    assert hybrid.rubric is not None and hybrid.rubric.rules[0].name == "Summary usefulness"
    assert hybrid.rubric.weights == {"code": 0.7, "rubric": 0.3}
    assert hybrid.metadata["metadata"] == {"category": "meeting_notes", "macro_category": "Content & Domain",
                                           "grading_type": "hybrid"}  # fmt: skip
    assert code_only.rubric is None and code_only.metadata["metadata"]["grading_type"] == "automated"
    assert hybrid.workdir == "/root/.openclaw/workspace" and hybrid.verifier.kind == "reward_sh"
    assert (suite / "task_0000" / "input_files" / "input" / "notes.txt").is_file()
    assert not (suite / "task_0000" / "input_files" / "reward").exists(), "the checker is not in the workspace"
    assert json.loads((suite / "suite.json").read_text())["source"] == str(src.resolve())

    result = runner.invoke(app, ["tasks", "check", str(suite), "--json"])
    lines = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    assert lines[-1] == {"tasks": 2, "ok": 2, "oracle_passed": 0, "nop_failed": 2, "errors": 0, "broken": 0}, (
        result.output
    )
    assert all(line["nop_reward"] == 0.0 for line in lines[:-1])

    # rows carry no solution; given one, the oracle passes: the checker scores the real workspace
    for task, solve in (("task_0000", (FIXTURE / "solution" / "solve.sh").read_text()),
                        ("sum-scores", "mkdir -p output && echo 12 > output/answer.txt\n")):  # fmt: skip
        (suite / task / "solution").mkdir()
        (suite / task / "solution" / "solve.sh").write_text(solve)
    result = runner.invoke(app, ["tasks", "check", str(suite), "--json"])
    lines = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    by_task = {line["task"]: line for line in lines[:-1]}
    assert by_task["task_0000"]["oracle_reward"] == 1.0 and by_task["task_0000"]["ok"]
    assert by_task["sum-scores"]["oracle_reward"] == pytest.approx(2 / 3), "ClawGym's mean of the sub-scores"
    assert lines[-1]["nop_failed"] == 2 and lines[-1]["errors"] == 0, result.output


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"prompt": ""}, "prompt must be a non-empty string"),
        ({"input_files": [{"file_path": "input/a.txt", "content": "x"}]}, "no reward/test.py"),
        ({"input_files": [{"file_path": "../escape.py", "content": "x"}]}, "must stay inside the task"),
        ({"rules": [{"name": "x"}]}, r"rules\[0\].scores"),
    ],
)
def test_a_bad_row_is_refused_naming_its_line_and_the_import_reports_it_broken(
    tmp_path: Path, change, error
) -> None:
    """convert_jsonl refuses the file at its first bad row; `tasks import` reports that row as one
    broken task naming its line and imports the others (nothing with --strict)."""
    rows = _rows()
    rows[1] = {**rows[1], **change}
    src = _jsonl(tmp_path / "rows.jsonl", rows)
    if change.get("rules"):  # the rubric is checked when the converted task loads
        folders = convert_jsonl(src, tmp_path / "out")
        with pytest.raises(TaskFormatError, match=error):
            load_tasks(folders[1].parent)
        return
    with pytest.raises(TaskFormatError, match=error) as info:
        convert_jsonl(src, tmp_path / "out")
    assert f"{src}:2" in str(info.value)
    common = ["--root", str(tmp_path / "s"), "--git-cache", str(tmp_path / "git"), "--json"]
    result = CliRunner().invoke(app, ["tasks", "import", "clawgym", str(src), *common])
    *lines, summary = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    assert result.exit_code == 0 and summary["imported"] == 1 and summary["broken"] == 1, result.output
    bad = next(line for line in lines if line["status"] == "broken")
    assert bad["path"] == "rows.jsonl:2" and f"{src}:2" in bad["reason"], bad
    strict = CliRunner().invoke(
        app, ["tasks", "import", "clawgym", str(src), *common, "--name=t", "--strict"]
    )
    assert strict.exit_code != 0 and not (tmp_path / "s" / "t").exists(), strict.output
