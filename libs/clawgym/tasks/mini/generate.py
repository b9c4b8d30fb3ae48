"""Writes the bundled mini suite to disk in the ClawGym task format, deterministically.

Every task's randomness comes from a string seed (suite seed, family, split, index), so the same
code writes the same bytes on any machine. Two kinds of held-out task, in the `test` split and,
drawn alike, in the `validation` split:

- new instances of a *trained* family (its `train` split holds other instances);
- every task of an *unseen* family: about a quarter of each level's families, chosen by a hash
  of the seed and the family name (not by how well a policy does on them), have no train tasks
  at all. `data_entry.json` says which (`family_split`: `trained` or `unseen`).

Settings are chosen on `validation`; `test` is for the figures a run reports. The test split is
drawn first, then train, then validation; no task repeats an instruction or solution of an
earlier-drawn held-out split, and validation repeats none of train's either. `mini_suite_dir()` generates once into a cache folder named after a hash of the
generator's source, so a changed family means a fresh folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
from pathlib import Path

from clawgym.tasks.mini.families import FAMILIES, MiniTask

SEED = 20261129
TRAIN_PER_FAMILY = 16
TEST_PER_FAMILY = 16
UNSEEN_PER_FAMILY = 24  # an unseen family is all held out: more instances to measure it by
UNSEEN_SHARE = 0.25  # of each level's families
DEFAULT_CACHE_DIR = Path.home() / ".cache" / "clawgym" / "tasks"
_MAX_TRIES = 200

REWARD_SH = """#!/usr/bin/env bash
# mini suite, family {family} (level {level}): {instruction}
# Prints 1.0 when the workspace (the first argument) shows the task done, else 0.0.
cd "${{1:-.}}" || {{ echo 0.0; exit 0; }}
if {check}; then echo 1.0; else echo 0.0; fi
"""
SOLVE_SH = """#!/usr/bin/env bash
set -e
{solution}
"""


def unseen_families(seed: int = SEED) -> list[str]:
    """The families held out of training: round(UNSEEN_SHARE × n) of each level's n families, those
    whose sha256(seed:family) sorts first."""
    by_level: dict[int, list[str]] = {}
    for family, make in FAMILIES.items():
        by_level.setdefault(make(random.Random(0)).level, []).append(family)
    chosen: list[str] = []
    for level in sorted(by_level):
        ranked = sorted(by_level[level], key=lambda f: hashlib.sha256(f"{seed}:{f}".encode()).hexdigest())
        chosen += ranked[: round(UNSEEN_SHARE * len(ranked))]
    return [f for f in FAMILIES if f in chosen]


def generate_tasks(
    seed: int = SEED,
    train: int = TRAIN_PER_FAMILY,
    test: int = TEST_PER_FAMILY,
    unseen: int = UNSEEN_PER_FAMILY,
) -> dict[str, list[MiniTask]]:
    """{"train": [...], "test": [...], "validation": [...]}: every family's test tasks first (`unseen`
    of a held-out family, else `test`), then `train` tasks of the trained families, none repeating a
    test instruction or solution, then validation tasks as many as test, repeating neither."""
    held_out = set(unseen_families(seed))
    splits: dict[str, list[MiniTask]] = {"train": [], "test": [], "validation": []}
    taken: set[str] = set()  # instructions and solutions of the splits drawn so far (train: none)
    plan = [(f, "test", unseen if f in held_out else test) for f in FAMILIES]
    plan += [(f, "train", train) for f in FAMILIES if f not in held_out]
    plan += [(f, "validation", unseen if f in held_out else test) for f in FAMILIES]
    for i, (family, split, count) in enumerate(plan):
        if split == "validation" and plan[i - 1][1] == "train":  # train is drawn: validation repeats none
            taken |= {t.solution for t in splits["train"]} | {t.instruction for t in splits["train"]}
        make, seen, made = FAMILIES[family], set(), 0
        for attempt in range(count * _MAX_TRIES):
            task = make(random.Random(f"{seed}:{family}:{split}:{attempt}"))
            if task.instruction in seen or task.instruction in taken or task.solution in taken:
                continue
            seen.add(task.instruction)
            splits[split].append(task)
            made += 1
            if made == count:
                break
        if split == "test":
            taken |= {t.solution for t in splits["test"]} | {t.instruction for t in splits["test"]}
    return splits


def write_task(task: MiniTask, dest: Path, task_id: str, split: str, family_split: str) -> None:
    """One task folder: data_entry.json, input_files/, reward/reward.sh, solution/solve.sh."""
    dest.mkdir(parents=True)
    entry = {
        "id": task_id,
        "user_query": task.instruction,
        "split": split,
        "family": task.family,
        "family_split": family_split,
        "level": task.level,
    }
    (dest / "data_entry.json").write_text(json.dumps(entry, indent=2) + "\n")
    for name, content in task.inputs.items():
        target = dest / "input_files" / name
        if name.endswith("/"):
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
    for folder, name, text in (
        (
            "reward",
            "reward.sh",
            REWARD_SH.format(
                family=task.family, level=task.level, instruction=task.instruction, check=task.check
            ),
        ),
        ("solution", "solve.sh", SOLVE_SH.format(solution=task.solution)),
    ):
        (dest / folder).mkdir()
        (dest / folder / name).write_text(text)
        (dest / folder / name).chmod(0o755)


def write_suite(dest: Path, seed: int = SEED) -> int:
    """Writes every task under dest/{train,test}/<id>/ plus suite.json; returns the task count."""
    splits = generate_tasks(seed)
    unseen = unseen_families(seed)
    counters: dict[tuple[str, str], int] = {}
    for split, tasks in splits.items():
        for task in tasks:
            n = counters[(split, task.family)] = counters.get((split, task.family), -1) + 1
            task_id = f"mini-{split}-{task.family}-{n:02d}"
            family_split = "unseen" if task.family in unseen else "trained"
            write_task(task, dest / split / task_id, task_id, split, family_split)
    total = sum(len(t) for t in splits.values())
    summary = {
        "name": "mini",
        "format": "clawgym",
        "seed": seed,
        "families": list(FAMILIES),
        "unseen_families": unseen,
        "tasks": total,
        "splits": {s: len(t) for s, t in splits.items()},
    }
    (dest / "suite.json").write_text(json.dumps(summary, indent=2) + "\n")
    return total


def source_hash() -> str:
    """A short hash of the generator's code: it names the cache folder."""
    digest = hashlib.sha256(str(SEED).encode())
    for module in ("families.py", "generate.py"):
        digest.update((Path(__file__).parent / module).read_bytes())
    return digest.hexdigest()[:12]


def mini_suite_dir(cache_dir: str | Path | None = None) -> Path:
    """The mini suite's folder, generated on first use (atomically, so concurrent callers agree)."""
    root = Path(cache_dir) if cache_dir is not None else DEFAULT_CACHE_DIR
    final = root / f"mini-{source_hash()}"
    if (final / "suite.json").is_file():
        return final
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".mini-", dir=root))
    try:
        write_suite(tmp)
        try:
            os.replace(tmp, final)
        except OSError:
            if not (final / "suite.json").is_file():  # lost a race to a half-written folder: not expected
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


if __name__ == "__main__":
    import sys

    out = Path(sys.argv[1]) if len(sys.argv) > 1 else mini_suite_dir()
    if len(sys.argv) > 1:
        print(write_suite(out), "tasks written to", out)
    else:
        print(out)
