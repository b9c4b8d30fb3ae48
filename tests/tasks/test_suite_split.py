"""`clawgym tasks import` gives a suite a held-out split, recorded in suite.json and applied on load.

The real CLI runs through typer's CliRunner on task folders written in tmp_path; the imported
suite is read back by the same loader the trainer and the evaluation use.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from typer.testing import CliRunner

from clawgym.tasks.loader import load_tasks
from clawgym_app.cli import app

runner = CliRunner()
FAMILIES = ("copy-file", "count-lines", "make-dir", "move-file", "sort-words", "sum-numbers", "upper-case")


def write_task(root: Path, task_id: str, **entry: object) -> Path:
    """A ClawGym task folder (no solution: nothing here runs it)."""
    folder = root / task_id
    (folder / "reward").mkdir(parents=True)
    (folder / "reward" / "reward.sh").write_text("echo 1.0\n")
    (folder / "data_entry.json").write_text(
        json.dumps({"id": task_id, "user_query": f"Do {task_id}.", **entry})
    )
    return folder


def source(root: Path) -> Path:
    """Seven families of three numbered instances (the family is the id without its -N), and two
    tasks whose metadata names their family ("text-tools") though their ids differ."""
    for family in FAMILIES:
        for n in range(3):
            write_task(root, f"{family}-{n}")
    write_task(root, "grep-errors", family="text-tools")
    write_task(root, "cut-columns", family="text-tools")
    return root


def imported(tmp_path: Path, name: str, *options: str, src: Path | None = None) -> dict:
    src = src or tmp_path / "src"
    if not src.exists():
        source(src)
    result = runner.invoke(
        app, ["tasks", "import", str(src), "--name", name, "--root", str(tmp_path / "suites"), "--json",
              "--replace", *options],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return json.loads(result.output.splitlines()[-1])


def splits_of(suite: Path) -> dict[str, set[str]]:
    """family → the splits its tasks are in, as the loader reads the suite."""
    out: dict[str, set[str]] = defaultdict(set)
    for task in load_tasks(suite):
        out[str(task.metadata["family"])].add(task.split)
    return dict(out)


def test_import_holds_out_whole_families_the_same_way_each_time(tmp_path):
    """A quarter of the families (2 of 8) go to test whole, seeded by the suite's name: importing
    again picks the same, another name its own; no family is in both splits; no task file changes."""
    summary = imported(tmp_path, "alpha")
    suite = tmp_path / "suites" / "alpha"
    families = splits_of(suite)
    assert set(families) == {*FAMILIES, "text-tools"}, f"families by metadata, else by id stem: {families}"
    assert all(len(splits) == 1 for splits in families.values()), f"a family in both splits: {families}"
    held = sorted(f for f, splits in families.items() if splits == {"test"})
    assert len(held) == 2 and summary["split"]["test_families"] == held, (families, summary)
    assert summary["split"]["by"] == "family" and summary["split"]["seed"] == "alpha", summary
    assert {t.split for t in load_tasks(suite)} == {"train", "test"}, "every task has a split"
    assert (suite / "copy-file-0" / "data_entry.json").read_text() == (
        tmp_path / "src" / "copy-file-0" / "data_entry.json"
    ).read_text(), "the split is kept in suite.json, never written into the task's own files"

    meta = json.loads((suite / "suite.json").read_text())
    again = imported(tmp_path, "alpha")
    assert again["split"] == summary["split"], "a re-import under the same name holds out the same families"
    assert json.loads((suite / "suite.json").read_text())["task_splits"] == meta["task_splits"]
    other = {name: imported(tmp_path, name)["split"]["test_families"] for name in ("beta", "gamma", "delta")}
    assert any(held != test for test in other.values()), f"the seed is the suite's name: {held} vs {other}"

    listed = runner.invoke(
        app, ["tasks", "list", "alpha", "--split", "test", "--json", "--root", str(tmp_path / "suites")]
    )
    rows = [json.loads(line) for line in listed.output.splitlines()]
    assert rows and {r["split"] for r in rows} == {"test"}, listed.output
    assert len(rows) == sum(3 if f in FAMILIES else 2 for f in held), f"the held-out families' tasks: {rows}"


def test_a_task_with_its_own_split_keeps_it_and_its_unsplit_family_follows(tmp_path):
    src = source(tmp_path / "src")
    entry = src / "make-dir-0" / "data_entry.json"
    entry.write_text(json.dumps({**json.loads(entry.read_text()), "split": "test"}))
    entry = src / "copy-file-1" / "data_entry.json"
    entry.write_text(json.dumps({**json.loads(entry.read_text()), "split": "train"}))
    for name in ("alpha", "beta", "gamma"):
        summary = imported(tmp_path, name, src=src)
        families = splits_of(tmp_path / "suites" / name)
        assert families["make-dir"] == {"test"}, f"its own test task holds its family out: {families}"
        assert families["copy-file"] == {"train"}, (
            f"its own train task keeps its family in training: {families}"
        )
        assert all(len(splits) == 1 for splits in families.values()), families
        assert summary["split"]["kept"] == 2, summary


def test_split_by_task_no_split_and_a_bad_share(tmp_path):
    summary = imported(tmp_path, "by-task", "--split-by", "task", "--held-out", "0.5")
    tasks = load_tasks(tmp_path / "suites" / "by-task")
    assert sum(t.split == "test" for t in tasks) == 12 == summary["split"]["test"], "half of the 23 tasks"
    assert {t.split for t in tasks} == {"train", "test"}

    imported(tmp_path, "unsplit", "--no-split")
    assert {t.split for t in load_tasks(tmp_path / "suites" / "unsplit")} == {""}, "--no-split assigns none"
    assert load_tasks(tmp_path / "suites" / "unsplit", split="test") == []

    for option in (["--held-out", "1.5"], ["--split-by", "level"]):
        bad = runner.invoke(
            app, ["tasks", "import", str(tmp_path / "src"), "--root", str(tmp_path / "s"), *option]
        )
        assert bad.exit_code == 2 and "error:" in bad.output, bad.output
        assert not (tmp_path / "s").exists(), "nothing is imported on a bad split option"


def test_the_text_report_says_the_split(tmp_path):
    result = runner.invoke(
        app,
        ["tasks", "import", str(source(tmp_path / "src")), "--name", "alpha", "--root", str(tmp_path / "r")],
    )
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if x.startswith("split by family"))
    assert "seeded by the suite name 'alpha'" in line and "held-out families: " in line, line
