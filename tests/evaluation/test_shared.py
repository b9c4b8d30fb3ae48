"""The report's "what the held-out figures share with training" is read off the suite, not written
for the mini suite: `Run.summary`'s `held_out` on an imported suite whose families, templates,
instructions and solutions are known."""

from __future__ import annotations

import json
from pathlib import Path

from clawgym.config import ClawgymConfig
from clawgym.run import Run, RunOutcome
from clawgym.tasks.suite_import import plan_import, write_suite


def write_task(root: Path, task_id: str, split: str, query: str, solution: str = "", **meta: object) -> None:
    folder = root / task_id
    (folder / "reward").mkdir(parents=True)
    (folder / "reward" / "reward.sh").write_text("echo 1.0\n")
    if solution:
        (folder / "solution").mkdir()
        (folder / "solution" / "solve.sh").write_text(solution)
    entry = {"id": task_id, "user_query": query, "split": split, **meta}
    (folder / "data_entry.json").write_text(json.dumps(entry))


def imported_suite(tmp_path: Path) -> Path:
    """Families by id stem (rename, count, upper); templates recorded; count-1 (test) repeats
    count-0's instruction and solution; upper has no training task."""
    src = tmp_path / "src"
    write_task(src, "rename-0", "train", "Rename a.txt to b.txt.", "mv a.txt b.txt\n", template="rename")
    write_task(src, "rename-1", "train", "Rename c.txt to d.txt.", "mv c.txt d.txt\n", template="rename")
    write_task(src, "rename-2", "test", "Rename e.txt to f.txt.", "mv e.txt f.txt\n", template="rename")
    write_task(src, "count-0", "train", "Count the lines of x.txt.", "wc -l < x.txt > n\n", template="count")
    write_task(src, "count-1", "test", "Count the lines of x.txt.", "wc -l < x.txt > n\n", template="count")
    write_task(src, "upper-0", "test", "Upper-case u.txt.", template="upper")
    write_task(src, "upper-1", "test", "Upper-case v.txt.", template="upper")
    return write_suite(plan_import(src), tmp_path / "suites", "facts").path


def summary_of(tmp_path: Path, **evaluation: object) -> dict:
    cfg = ClawgymConfig(trainer={"suite": str(imported_suite(tmp_path))}, evaluation=evaluation)
    run = Run(cfg, parts=None, run_dir=tmp_path / "run")  # type: ignore[arg-type]  (summary reads no parts)
    return run.summary(RunOutcome("r", 0))


def test_the_held_out_text_says_what_the_suites_data_shows_is_shared(tmp_path):
    held = summary_of(tmp_path)["held_out"]
    trained, unseen = held[""], held["_unseen_families"]
    assert trained.startswith("2 held-out tasks of 2 of the 2 families trained on."), trained
    assert (
        "the instruction of 1 (count-1)" in trained and "the reference solution of 1 (count-1)" in trained
    ), f"an evaluated task that repeats a training task's instruction and solution is named: {trained}"
    assert "the template of 2 of the 2 recording one" in trained, trained
    assert "Unknown (the suite's metadata records none): phrasing, category." in trained, trained
    assert "vocabulary" not in trained and "phrasings" not in trained, "nothing the data cannot show"
    assert unseen.startswith("2 tasks of 1 family with no training task (upper)."), unseen
    assert (
        "Not shared: any family; any instruction (none equals a training task's); any template" in unseen
    ), unseen
    assert "every evaluated harness is trained through" in unseen, unseen


def test_an_evaluated_harness_not_trained_through_is_named(tmp_path):
    held = summary_of(tmp_path, harnesses=["reference", "nop"])["held_out"]
    assert "the harness prompt, except for nop (not trained through)" in held[""], held


def sibling_suite(tmp_path: Path) -> Path:
    """rename trains; archive (no training task) runs rename's `mv` in its answer shape, shout's
    `tr` is no training task's program: a sibling family and a new skill."""
    src = tmp_path / "src"
    write_task(src, "rename-0", "train", "Rename a.txt to b.txt.", "set -e\nmv a.txt b.txt\n")
    write_task(src, "rename-1", "test", "Rename c.txt to d.txt.", "set -e\nmv c.txt d.txt\n")
    write_task(src, "archive-0", "test", "Move x.log into old/.", "set -e\nmv x.log old/\n")
    write_task(src, "shout-0", "test", "Upper-case u.txt into v.txt.", "set -e\ntr a-z A-Z < u.txt > v.txt\n")
    return write_suite(plan_import(src), tmp_path / "suites", "siblings").path


def test_families_without_training_tasks_are_labelled_siblings_or_new_skills_by_their_solutions(tmp_path):
    cfg = ClawgymConfig(trainer={"suite": str(sibling_suite(tmp_path))})
    summary = Run(cfg, parts=None, run_dir=tmp_path / "run").summary(RunOutcome("r", 0))  # type: ignore[arg-type]
    assert summary["label_unseen_families"] == "unseen families (1 of 2 siblings)", summary
    unseen = summary["held_out"]["_unseen_families"]
    assert "in 1 of the 2 families (siblings: archive: mv, the answer shape of 1 of 1)" in unseen, unseen
    assert "any program, flag or answer shape of training, in shout (new skills)" in unseen, unseen
    shares = {f: row.get("shares") for f, row in summary["per_family"].items()}
    assert shares["archive"] == {
        "sibling": True,
        "programs": ["mv"],
        "flags": [],
        "same_shape": 1,
        "solutions": 1,
    }
    assert shares["shout"]["sibling"] is False and shares["rename"] is None, shares
