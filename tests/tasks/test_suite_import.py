"""`clawgym tasks import SRC`: mixed layouts, broken tasks, git sources, each task reported.

The real CLI runs through typer's CliRunner; git sources are real repositories made in tmp_path
and fetched with the real `git` (by path and by file:// URL).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clawgym.errors import InvalidArgument
from clawgym.tasks.git_source import GitSource, parse_source, redact
from clawgym.tasks.loader import load_tasks
from clawgym_app.cli import app

DATA = Path(__file__).parent / "data"
runner = CliRunner()


def json_lines(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def mixed_source(folder: Path) -> Path:
    """ClawGym, TB1 and Harbor tasks side by side: one that only its own image runs (the docker
    backend, not local), one that no backend runs (it needs a compose service) and one broken
    (TB1 without its test file)."""
    shutil.copytree(DATA / "clawgym" / "write-greeting", folder / "claw" / "write-greeting")
    shutil.copytree(DATA / "clawgym" / "make-notes-dir", folder / "claw" / "make-notes-dir")
    shutil.copytree(DATA / "terminal-bench" / "csv-total", folder / "tb1" / "csv-total")
    shutil.copytree(DATA / "harbor" / "count-words", folder / "tb2" / "count-words")
    shutil.copytree(DATA / "harbor" / "custom-image", folder / "tb2" / "custom-image")
    shutil.copytree(DATA / "terminal-bench" / "needs-postgres", folder / "tb1" / "needs-postgres")
    broken = folder / "tb1" / "no-tests"
    shutil.copytree(DATA / "terminal-bench" / "csv-total", broken)
    (broken / "tests" / "test_outputs.py").unlink()
    return folder


def git(*args: str, cwd: Path) -> str:
    who = ["-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"]
    done = subprocess.run(["git", *who, *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_a_mixed_folder_imports_every_loadable_task_and_reports_each(tmp_path):
    """Layouts are detected per task folder; the broken one is reported with its load error and
    left out, the rest (the unsupported one too) are copied at their paths under the source."""
    src = mixed_source(tmp_path / "src")
    root = tmp_path / "suites"
    result = runner.invoke(
        app, ["tasks", "import", str(src), "--name", "mixed", "--root", str(root), "--json"]
    )
    assert result.exit_code == 0, f"broken tasks do not stop the import: {result.output}"
    *lines, summary = json_lines(result.output)
    by_path = {line["path"]: line for line in lines}
    assert {p: (r["format"], r["status"], r["imported"]) for p, r in by_path.items()} == {
        "claw/make-notes-dir": ("clawgym", "caveats", True),
        "claw/write-greeting": ("clawgym", "ok", True),
        "tb1/csv-total": ("terminal-bench", "caveats", True),
        "tb1/no-tests": ("terminal-bench", "broken", False),
        "tb2/count-words": ("harbor", "ok", True),
        "tb2/custom-image": ("harbor", "caveats", True),
        "tb1/needs-postgres": ("terminal-bench", "unsupported", True),
    }, result.output
    broken = by_path["tb1/no-tests"]["reason"]
    assert "no-tests/tests" in broken and "no test_*.py files" in broken, (
        f"the load error names the task's folder and the missing file: {broken}"
    )
    assert by_path["tb2/custom-image"]["backends"] == {
        "local": "needs its own image 'registry.example.com/custom/service:1.2'",
        "docker": None,
    }, "a task in its own image runs on the docker backend only"
    unsupported = by_path["tb1/needs-postgres"]["backends"]
    assert unsupported["local"] and unsupported["docker"] and "service" in unsupported["docker"], (
        f"no backend starts a compose service beside the task: {unsupported}"
    )
    assert any("run-tests.sh is not run" in c for c in by_path["tb1/csv-total"]["caveats"]), (
        "a TB1 task says its tests run with our pytest, not its run-tests.sh"
    )
    assert any("no reference solution" in c for c in by_path["claw/make-notes-dir"]["caveats"])
    assert summary["found"] == 7 and summary["imported"] == 6 and summary["broken"] == 1, summary
    assert (summary["ok"], summary["caveats"], summary["unsupported"]) == (2, 3, 1), summary

    suite = root / "mixed"
    assert not (suite / "tb1" / "no-tests").exists(), "a broken task is not copied"
    assert sorted(t.id for t in load_tasks(suite)) == [
        "count-words",
        "csv-total",
        "custom-image",
        "make-notes-dir",
        "needs-postgres",
        "write-greeting",
    ], "the imported suite loads whole, each task in its own layout"
    meta = json.loads((suite / "suite.json").read_text())
    assert meta["format"] == "mixed" and meta["tasks"] == 6 and meta["broken"] == 1
    assert len(meta["report"]) == 7, "suite.json keeps the whole report, broken task included"
    listed = json_lines(runner.invoke(app, ["tasks", "list", "--json", "--root", str(root)]).output)
    assert listed[-1]["suite"] == "mixed" and listed[-1]["tasks"] == "6"


def test_the_text_report_names_each_status_and_ends_with_the_summary(tmp_path):
    src = mixed_source(tmp_path / "src")
    result = runner.invoke(app, ["tasks", "import", str(src), "--root", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    assert "BROKEN      tb1/no-tests terminal-bench" in result.output, result.output
    assert "    not on local: needs its own image" in result.output, (
        "an unsupported task says why, per backend"
    )
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("imported 6 of 7 tasks as suite src"), f"the summary ends the report: {last}"
    assert "1 broken" in last and "1 unsupported" in last, last


def test_the_text_report_says_each_distinct_caveat_once_with_its_task_count(tmp_path):
    """Two TB1 tasks share "run-tests.sh is not run" and two tasks have no solution: one line each,
    with the count and the tasks; --json keeps the caveats per task."""
    src = mixed_source(tmp_path / "src")
    result = runner.invoke(app, ["tasks", "import", str(src), "--root", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    runner_lines = [x for x in lines if "run-tests.sh is not run" in x]
    assert len(runner_lines) == 1, f"a caveat shared by tasks is printed once: {runner_lines}"
    assert runner_lines[0].startswith("caveat, 2 tasks (csv-total, needs-postgres): run-tests.sh"), (
        runner_lines
    )
    solution_lines = [x for x in lines if "no reference solution" in x]
    assert solution_lines == [
        "caveat, 2 tasks (make-notes-dir, custom-image): no reference solution: the oracle cannot check "
        "the verifier (nop only)"
    ], solution_lines
    per_task = runner.invoke(app, ["tasks", "import", str(src), "--root", str(tmp_path / "j"), "--json"])
    caveats = {r["task"]: r["caveats"] for r in json_lines(per_task.output)[:-1]}
    assert sum(any("run-tests.sh" in c for c in cs) for cs in caveats.values()) == 2, caveats


def test_strict_imports_nothing_when_a_task_is_broken(tmp_path):
    src = mixed_source(tmp_path / "src")
    root = tmp_path / "r"
    result = runner.invoke(app, ["tasks", "import", str(src), "--strict", "--root", str(root)])
    assert result.exit_code == 2, result.output
    assert "1 broken task(s), nothing imported (strict)" in result.output and "tb1/no-tests" in result.output
    assert "BROKEN" in result.output, "the per-task report comes before the refusal"
    assert not root.exists() or not any(root.iterdir()), "strict: nothing is copied"


def test_format_option_skips_tasks_of_other_layouts(tmp_path):
    src = mixed_source(tmp_path / "src")
    result = runner.invoke(
        app, ["tasks", "import", str(src), "--format", "tb2", "--root", str(tmp_path / "r"), "--json"]
    )
    *lines, summary = json_lines(result.output)
    assert result.exit_code == 0, result.output
    skipped = {line["path"]: line["reason"] for line in lines if line["status"] == "skipped"}
    assert skipped["claw/write-greeting"] == "a clawgym task, not harbor", skipped
    assert summary["imported"] == 2 and summary["skipped"] == 5, summary


def test_a_single_task_folder_is_a_suite_of_one(tmp_path):
    root = tmp_path / "r"
    result = runner.invoke(
        app, ["tasks", "import", str(DATA / "harbor" / "count-words"), "--root", str(root)]
    )
    assert result.exit_code == 0, result.output
    assert [t.id for t in load_tasks(root / "count-words")] == ["count-words"]


def test_the_older_format_first_form_still_imports(tmp_path):
    root = tmp_path / "r"
    result = runner.invoke(app, ["tasks", "import", "tb", str(DATA / "terminal-bench"), "--root", str(root)])
    assert result.exit_code == 0, result.output
    assert json.loads((root / "terminal-bench" / "suite.json").read_text())["format"] == "terminal-bench"


def test_a_second_task_with_the_same_id_is_broken_not_overwritten(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(DATA / "clawgym" / "write-greeting", src / "a" / "write-greeting")
    shutil.copytree(DATA / "clawgym" / "write-greeting", src / "b" / "greet-again")  # its id: write-greeting
    result = runner.invoke(app, ["tasks", "import", str(src), "--root", str(tmp_path / "r"), "--json"])
    lines = {line["path"]: line for line in json_lines(result.output)[:-1]}
    assert lines["a/write-greeting"]["status"] == "ok"
    assert lines["b/greet-again"]["status"] == "broken"
    assert "is also the id of a/write-greeting" in lines["b/greet-again"]["reason"], lines


def test_a_task_with_a_symlink_out_of_its_folder_is_broken(tmp_path):
    src = tmp_path / "src"
    task = src / "write-greeting"
    shutil.copytree(DATA / "clawgym" / "write-greeting", task)
    (task / "input_files" / "secrets").symlink_to("/etc")
    shutil.copytree(DATA / "clawgym" / "sum-scores", src / "sum-scores")
    result = runner.invoke(app, ["tasks", "import", str(src), "--root", str(tmp_path / "r"), "--json"])
    lines = {line["path"]: line for line in json_lines(result.output)[:-1]}
    assert lines["write-greeting"]["status"] == "broken", lines
    assert "symlink input_files/secrets leads out of the task folder" in lines["write-greeting"]["reason"]
    assert lines["sum-scores"]["status"] == "ok" and result.exit_code == 0


def test_a_task_with_a_symlink_loop_is_broken_and_the_others_are_imported(tmp_path):
    """A symlink that resolves to itself is one broken task, named with the link (it was a
    RuntimeError traceback that stopped the whole import)."""
    src = tmp_path / "src"
    shutil.copytree(DATA / "clawgym" / "write-greeting", src / "write-greeting")
    (src / "write-greeting" / "input_files" / "loop").symlink_to("loop")
    shutil.copytree(DATA / "clawgym" / "sum-scores", src / "sum-scores")
    root = tmp_path / "r"
    result = runner.invoke(app, ["tasks", "import", str(src), "--root", str(root), "--json"])
    assert result.exit_code == 0, (
        f"one bad task does not stop the import: {result.output} {result.exception!r}"
    )
    *lines, summary = json_lines(result.output)
    by_path = {line["path"]: line for line in lines}
    assert by_path["write-greeting"]["status"] == "broken", lines
    assert "the symlink input_files/loop is a loop" in by_path["write-greeting"]["reason"], lines
    assert by_path["sum-scores"]["status"] == "ok" and (summary["imported"], summary["broken"]) == (1, 1), (
        summary
    )
    assert sorted(p.name for p in (root / "src").iterdir()) == ["suite.json", "sum-scores"], (
        "the loop is not copied"
    )


def test_a_task_folder_named_like_the_suite_file_is_broken_not_a_crash(tmp_path):
    """A task folder `suite.json` would take the place of the suite's own file (an IsADirectoryError
    that stopped the import): it is reported broken, the other task imported."""
    src = tmp_path / "src"
    shutil.copytree(DATA / "clawgym" / "write-greeting", src / "suite.json")
    shutil.copytree(DATA / "clawgym" / "sum-scores", src / "sum-scores")
    root = tmp_path / "r"
    result = runner.invoke(app, ["tasks", "import", str(src), "--root", str(root)])
    assert result.exit_code == 0, f"{result.output} {result.exception!r}"
    assert "BROKEN      suite.json" in result.output and "would be the suite's own file" in result.output
    assert result.output.strip().splitlines()[-1].startswith("imported 1 of 2 tasks"), result.output
    assert json.loads((root / "src" / "suite.json").read_text())["tasks"] == 1


def _row(task_id: str, *files: tuple[str, str], prompt: str = "Write ok.txt.") -> dict:
    checker = ("reward/test.py", "import json; print(json.dumps({'ok': 1.0}))")
    return {
        "task_id": task_id,
        "prompt": prompt,
        "input_files": [{"file_path": p, "content": c} for p, c in (*files, checker)],
    }


def test_jsonl_rows_that_are_not_tasks_are_reported_by_line_and_the_others_imported(tmp_path):
    """A lone surrogate (a JSON \\ud800 escape), a name that is a file and a folder, a line that is
    not JSON: each is one broken task naming its line (each was a traceback, or refused the whole
    file); the good rows are imported, a cached conversion reports the same, and --strict imports none."""
    src = tmp_path / "rows.jsonl"
    rows = [
        json.dumps(_row("first")),
        json.dumps(_row("surrogate", prompt="Say \ud800 twice.")),  # json.dumps escapes it: valid JSON
        json.dumps(_row("clash", ("data/a", "x"), ("data/a/b", "y"))),
        "{not json",
        json.dumps(_row("last", ("data/a", "x"))),
    ]
    src.write_text("\n".join(rows) + "\n")
    root, cache = tmp_path / "suites", tmp_path / "cache" / "git"
    common = ["--root", str(root), "--git-cache", str(cache)]
    result = runner.invoke(app, ["tasks", "import", str(src), *common, "--json"])
    assert result.exit_code == 0, f"bad rows do not stop the import: {result.output} {result.exception!r}"
    *lines, summary = json_lines(result.output)
    broken = {line["path"]: line["reason"] for line in lines if line["status"] == "broken"}
    assert sorted(broken) == ["rows.jsonl:2", "rows.jsonl:3", "rows.jsonl:4"], lines
    assert f"{src}:2: holds a lone surrogate '\\ud800'" in broken["rows.jsonl:2"], broken
    assert (
        "'input_files/data/a' is both a file and the folder of 'input_files/data/a/b'"
        in broken["rows.jsonl:3"]
    )
    assert f"{src}:4: not JSON" in broken["rows.jsonl:4"], broken
    assert (summary["found"], summary["imported"], summary["broken"]) == (5, 2, 3), summary
    assert sorted(t.id for t in load_tasks(root / "rows")) == ["first", "last"], "the good rows are the suite"

    again = runner.invoke(app, ["tasks", "import", str(src), *common, "--replace"])
    assert again.exit_code == 0, again.output
    assert again.output.count("BROKEN") == 3, (
        f"the cached conversion still reports the bad rows: {again.output}"
    )
    assert again.output.strip().splitlines()[-1].startswith("imported 2 of 5 tasks as suite rows"), (
        again.output
    )

    strict = runner.invoke(app, ["tasks", "import", str(src), *common, "--name", "s", "--strict"])
    assert strict.exit_code == 2 and "3 broken task(s), nothing imported (strict)" in strict.output, (
        strict.output
    )
    assert not (root / "s").exists()


def test_nothing_loadable_is_an_error_and_copies_nothing(tmp_path):
    bad = tmp_path / "src" / "bad"
    bad.mkdir(parents=True)
    (bad / "data_entry.json").write_text("{}")
    root = tmp_path / "r"
    result = runner.invoke(app, ["tasks", "import", str(tmp_path / "src"), "--root", str(root)])
    assert result.exit_code == 2 and "user_query" in result.output, result.output
    assert "no task loads, nothing to import" in result.output
    assert not root.exists() or not any(root.iterdir()), "nothing is copied when no task loads"
    (tmp_path / "empty" / "docs").mkdir(parents=True)
    empty = runner.invoke(app, ["tasks", "import", str(tmp_path / "empty"), "--root", str(root)])
    assert empty.exit_code == 2 and "no task folders" in empty.output, empty.output


@pytest.fixture
def task_repo(tmp_path) -> tuple[Path, str]:
    """A git repository: `v1` (tag) has suites/{tb1,tb2}; main then adds a broken task and a README."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git("init", "-q", cwd=repo)
    shutil.copytree(DATA / "terminal-bench" / "csv-total", repo / "suites" / "tb1" / "csv-total")
    shutil.copytree(DATA / "harbor" / "count-words", repo / "suites" / "tb2" / "count-words")
    git("add", ".", cwd=repo)
    git("commit", "-qm", "two tasks", cwd=repo)
    git("tag", "v1", cwd=repo)
    v1 = git("rev-parse", "HEAD", cwd=repo)
    broken = repo / "suites" / "tb2" / "no-test"
    broken.mkdir()
    (broken / "instruction.md").write_text("Do it.\n")
    (repo / "README.md").write_text("tasks\n")
    git("add", ".", cwd=repo)
    git("commit", "-qm", "a broken task", cwd=repo)
    return repo, v1


def test_import_from_a_local_git_repository_at_a_ref_and_subfolder(tmp_path, task_repo):
    """`git+PATH#REF:PATH` and `file://…#REF:PATH` fetch that commit shallowly into the cache."""
    repo, v1 = task_repo
    root, cache = tmp_path / "suites", tmp_path / "git-cache"
    common = ["--root", str(root), "--git-cache", str(cache), "--json"]
    at_tag = runner.invoke(app, ["tasks", "import", f"git+{repo}#v1:suites", *common])
    assert at_tag.exit_code == 0, at_tag.output
    *lines, summary = json_lines(at_tag.output)
    assert [line["path"] for line in lines] == ["tb1/csv-total", "tb2/count-words"], "v1 has no broken task"
    assert summary["suite"] == "suites" and summary["commit"] == v1, "the suite is named after PATH"
    meta = json.loads((root / "suites" / "suite.json").read_text())
    assert meta["source"] == f"{repo}#v1:suites" and meta["commit"] == v1
    shallow = subprocess.run(
        ["git", "rev-parse", "--is-shallow-repository"],
        cwd=next(p for p in cache.iterdir() if p.is_dir()),
        capture_output=True,
        text=True,
    )
    assert shallow.stdout.strip() == "true", "the cache holds a shallow fetch"

    at_head = runner.invoke(
        app, ["tasks", "import", f"file://{repo}#main:suites/tb2", "--name", "h", *common]
    )
    assert at_head.exit_code == 0, at_head.output
    *lines, summary = json_lines(at_head.output)
    assert {line["path"]: line["status"] for line in lines} == {"count-words": "ok", "no-test": "broken"}
    assert "no-test: no tests/test.sh" in lines[1]["reason"], lines[1]
    assert summary["commit"] != v1 and summary["imported"] == 1

    by_commit = runner.invoke(app, ["tasks", "import", f"git+{repo}#{v1}:suites/tb1", "--name", "c", *common])
    assert by_commit.exit_code == 0 and json_lines(by_commit.output)[-1]["commit"] == v1, by_commit.output


def test_a_git_source_with_a_missing_ref_or_folder_is_a_clear_error(tmp_path, task_repo):
    repo, _ = task_repo
    common = ["--root", str(tmp_path / "r"), "--git-cache", str(tmp_path / "c")]
    no_ref = runner.invoke(app, ["tasks", "import", f"git+{repo}#nope:suites", *common])
    assert no_ref.exit_code == 2 and "no ref 'nope'" in no_ref.output, no_ref.output
    no_dir = runner.invoke(app, ["tasks", "import", f"git+{repo}#v1:elsewhere", *common])
    assert no_dir.exit_code == 2 and "no folder 'elsewhere' in the repository" in no_dir.output, no_dir.output
    no_repo = runner.invoke(app, ["tasks", "import", f"git+{tmp_path / 'missing'}", *common])
    assert no_repo.exit_code == 2 and "git could not fetch it" in no_repo.output, no_repo.output


def test_git_source_syntax():
    assert parse_source("tasks/here") is None, "a plain path is a folder"
    assert parse_source("https://github.com/org/repo.git#v2:tasks/x") == GitSource(
        "https://github.com/org/repo.git", "v2", "tasks/x"
    )
    assert parse_source("git@github.com:org/repo.git#:tasks") == GitSource(
        "git@github.com:org/repo.git", "", "tasks"
    )
    assert parse_source("git+https://host/r.git#main") == GitSource("https://host/r.git", "main", "")
    assert parse_source("git+/srv/r.git#main:a/./b/") == GitSource("/srv/r.git", "main", "a/b")
    with pytest.raises(InvalidArgument, match="inside the repository"):
        parse_source("git+/srv/r.git#main:../up")
    assert redact("https://me:tok3n@host/r.git") == "https://me:***@host/r.git", "no password in reports"
