"""Writes the bundled mini suite to disk in the ClawGym task format, deterministically.

Every task's randomness comes from a string seed (suite seed, family, split, index), so the same
code writes the same bytes on any machine. The held-out test split is drawn first and the train
split never repeats one of its instructions. `mini_suite_dir()` generates once into a cache folder
named after a hash of the generator's source, so a changed family means a fresh folder.
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


def generate_tasks(
    seed: int = SEED, train: int = TRAIN_PER_FAMILY, test: int = TEST_PER_FAMILY
) -> dict[str, list[MiniTask]]:
    """{"train": [...], "test": [...]}: `test` then `train` tasks per family; no instruction in both."""
    splits: dict[str, list[MiniTask]] = {"train": [], "test": []}
    for family, make in FAMILIES.items():
        seen: set[str] = set()
        for split, count in (("test", test), ("train", train)):
            made = 0
            for attempt in range(count * _MAX_TRIES):
                task = make(random.Random(f"{seed}:{family}:{split}:{attempt}"))
                if task.instruction in seen:
                    continue
                seen.add(task.instruction)
                splits[split].append(task)
                made += 1
                if made == count:
                    break
    return splits


def write_task(task: MiniTask, dest: Path, task_id: str, split: str) -> None:
    """One task folder: data_entry.json, input_files/, reward/reward.sh, solution/solve.sh."""
    dest.mkdir(parents=True)
    entry = {
        "id": task_id,
        "user_query": task.instruction,
        "split": split,
        "family": task.family,
        "level": task.level,
    }
    (dest / "data_entry.json").write_text(json.dumps(entry, indent=2) + "\n")
    if task.inputs:
        (dest / "input_files").mkdir()
        for name, content in task.inputs.items():
            (dest / "input_files" / name).write_text(content)
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
    counters: dict[tuple[str, str], int] = {}
    for split, tasks in splits.items():
        for task in tasks:
            n = counters[(split, task.family)] = counters.get((split, task.family), -1) + 1
            task_id = f"mini-{split}-{task.family}-{n:02d}"
            write_task(task, dest / split / task_id, task_id, split)
    total = sum(len(t) for t in splits.values())
    summary = {
        "name": "mini",
        "format": "clawgym",
        "seed": seed,
        "families": list(FAMILIES),
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
