"""The bundled mini suite: reproducible, split without leaks, and every task is sound."""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from pathlib import Path

from clawgym.evaluation.select import held_out, train_and_held_out
from clawgym.evaluation.shared import unseen_label
from clawgym.harnesses import reference_agent
from clawgym.orchestrator.check import check_tasks, summarize
from clawgym.sandbox import SandboxConfig, make_sandbox_backend
from clawgym.tasks.commands import command_parts
from clawgym.tasks.loader import load_tasks
from clawgym.tasks.mini.families import FAMILIES
from clawgym.tasks.mini.generate import (
    TEST_PER_FAMILY,
    TRAIN_PER_FAMILY,
    UNSEEN_PER_FAMILY,
    generate_tasks,
    mini_suite_dir,
    unseen_families,
    write_suite,
)
from clawgym.tasks.provision import Provisioner


def tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def test_generation_is_byte_for_byte_reproducible(tmp_path):
    """Same seed and code, same bytes: the suite needs no committed data to be reproducible."""
    write_suite(tmp_path / "a")
    write_suite(tmp_path / "b")
    assert tree_digest(tmp_path / "a") == tree_digest(tmp_path / "b"), "two generations differ"


def test_suite_has_many_families_with_several_phrasings_and_large_vocabularies():
    """At least 30 families at levels 1-2, each with several phrasings; names vary widely."""
    splits = generate_tasks()
    tasks = splits["train"] + splits["test"]
    levels = Counter(t.level for t in {t.family: t for t in tasks}.values())
    assert levels[1] + levels[2] >= 30, f"families per level: {levels}"
    for family in FAMILIES:
        mine = [t for t in tasks if t.family == family]
        # a phrasing is the instruction with every word that also occurs in the solution taken out
        templates = {
            " ".join(w for w in t.instruction.split() if w.strip(".,:'\"?") not in t.solution) for t in mine
        }
        assert len(templates) >= 2, f"{family} has one phrasing: {templates}"
    paths = {p for t in tasks for p in t.inputs}
    assert len(paths) >= 300 and any("/" in p.rstrip("/") for p in paths), "input paths vary and nest"


def test_family_split_keeps_unseen_families_out_of_training(tmp_path):
    """No family of the unseen-family split has a training task; every trained family has held-out
    instances; no held-out instruction or solution equals a training task's (whatever its family)."""
    suite = mini_suite_dir(tmp_path)
    assert mini_suite_dir(tmp_path) == suite, "a second call reuses the generated folder"
    tasks = load_tasks(suite)
    unseen = set(unseen_families())
    assert 0 < len(unseen) < len(FAMILIES) / 2, unseen
    assert {1, 2} <= {_level(f) for f in unseen}, "unseen families at both quickstart levels"
    train = [t for t in tasks if t.split == "train"]
    test = [t for t in tasks if t.split == "test"]
    assert not unseen & {t.metadata["family"] for t in train}, "an unseen family has a train task"
    per_family = Counter(t.metadata["family"] for t in test)
    for family in FAMILIES:
        want = UNSEEN_PER_FAMILY if family in unseen else TEST_PER_FAMILY
        assert per_family[family] == want, f"{family}: {per_family[family]} held-out tasks, want {want}"
    assert Counter(t.metadata["family"] for t in train) == {
        f: TRAIN_PER_FAMILY for f in FAMILIES if f not in unseen
    }
    assert all(
        t.metadata["family_split"] == ("unseen" if t.metadata["family"] in unseen else "trained")
        for t in tasks
    )
    splits = generate_tasks()
    train_solutions = {t.solution for t in splits["train"]}
    train_instructions = {t.instruction for t in splits["train"]}
    leaked = [
        t for t in splits["test"] if t.solution in train_solutions or t.instruction in train_instructions
    ]
    assert not leaked, f"held-out tasks whose solution or instruction is a training task's: {leaked[:3]}"
    assert len({t.id for t in tasks}) == len(tasks), "task ids are unique"


def _level(family: str) -> int:
    import random

    return FAMILIES[family](random.Random(0)).level


def test_quickstart_held_out_sets_are_what_they_say():
    """The quickstart's two held-out sets: instances of trained families, and families never trained."""
    train_ids, eval_ids = train_and_held_out("mini", max_level=2, held_out=48, unseen=24)
    parts = held_out("mini", train_ids, eval_ids)
    assert len(parts.ids("trained")) == 48 and len(parts.ids("unseen")) == 24
    assert set(parts.families("unseen")) == {f for f in unseen_families() if _level(f) <= 2}
    assert not set(parts.families("unseen")) & parts.trained
    assert not set(eval_ids) & set(train_ids)
    # what the audit of the unseen families found, read off their solutions: 6 of the 8 run a trained
    # family's program (3 in a training task's answer shape); 2 are new skills
    shared = parts.shared["unseen"]
    assert unseen_label(shared) == "unseen families (6 of 8 siblings)", shared.by_family
    assert [f for f, s in shared.by_family.items() if not s.sibling] == ["first_line", "write_two_lines"]
    assert sum(s.same_shape == s.solutions for s in shared.by_family.values()) == 3, shared.by_family


def test_the_validation_split_is_drawn_like_test_and_repeats_no_other_split():
    """Settings are chosen on validation: as many tasks per family as test, the same unseen families,
    no instruction or solution of train or test; the quickstart's held-out sets come from either."""
    splits = generate_tasks()
    assert Counter(t.family for t in splits["validation"]) == Counter(t.family for t in splits["test"])
    for other in ("train", "test"):
        texts = {t.instruction for t in splits[other]} | {t.solution for t in splits[other]}
        clash = [t for t in splits["validation"] if t.instruction in texts or t.solution in texts]
        assert not clash, f"validation repeats {other}: {clash[:2]}"
    train_ids, test_ids = train_and_held_out("mini", max_level=2, held_out=24, unseen=16)
    same_train, val_ids = train_and_held_out("mini", max_level=2, held_out=24, unseen=16, split="validation")
    assert same_train == train_ids and len(val_ids) == len(test_ids) == 40
    assert all(t.startswith("mini-validation-") for t in val_ids) and not set(val_ids) & set(test_ids)
    parts = held_out("mini", train_ids, val_ids)
    assert (len(parts.ids("trained")), len(parts.ids("unseen"))) == (24, 16), "both held-out kinds"


def test_worked_examples_share_no_answer_shape_or_program_with_any_family():
    """The reference harness's worked examples answer no mini-suite task: no example command has the
    shape of a solution, nor uses a program any solution uses."""
    examples = [
        reference_agent.extract_action(turn["content"])
        for turn in reference_agent.EXAMPLE_TURNS
        if turn["role"] == "assistant" and "```" in turn["content"]
    ]
    assert len(examples) == 3 and all(examples), examples
    splits = generate_tasks()
    solution_shapes = {command_parts(t.solution).shape for ts in splits.values() for t in ts}
    solution_programs = set().union(
        *(command_parts(t.solution).programs for ts in splits.values() for t in ts)
    )
    assert command_parts("echo hello > greeting.txt").shape in solution_shapes, (
        "the shape check would catch the old example"
    )
    for command in examples:
        parts = command_parts(command)
        assert parts.shape not in solution_shapes, f"example {command!r} has a solution's shape"
        assert not parts.programs & solution_programs, (
            f"example {command!r} uses {parts.programs & solution_programs}"
        )


def test_every_task_passes_its_oracle_and_fails_nop(tmp_path):
    """Every task of the suite, in real sandboxes: the reference solution scores 1, doing nothing 0."""
    tasks = load_tasks(mini_suite_dir(tmp_path / "cache"))
    cfg = SandboxConfig()
    cfg.local.root_dir = str(tmp_path / "sandboxes")

    async def run():
        backend = make_sandbox_backend(cfg)
        try:
            return await check_tasks(tasks, backend, Provisioner(tmp_path / "provision"), concurrency=8)
        finally:
            await backend.close()

    checks = asyncio.run(run())
    bad = [c.as_json() for c in checks if not c.ok]
    assert not bad, f"{len(bad)} unsound tasks, e.g. {bad[:2]}"
    n = len(tasks)
    assert summarize(checks) == {
        "tasks": n,
        "ok": n,
        "oracle_passed": n,
        "nop_failed": n,
        "errors": 0,
        "broken": 0,
    }
