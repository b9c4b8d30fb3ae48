"""A suite's held-out split: which of its tasks train and which are held out, and each task's family.

Terminal-Bench and Harbor tasks carry no split and a ClawGym task's own (`data_entry.json`'s
`split`) is optional, so `tasks import` chooses one (`assign_split`) and records it in the suite's
`suite.json` (`task_splits`: task id → `train` | `test`; `task_families`: task id → family). The
loader applies both to every task it loads from the suite folder (`apply_recorded`); the task's own
files are never rewritten, and a task's own split and `metadata.family` win over the recorded ones.

The family of a task: its `metadata.family` when it names one, else its id without a trailing `-N`
or `_N` (`sort-csv-1` and `sort-csv-2` are one family; an id without a number is a family of its
own). Split by family (the default), a share of the families is held out whole, so no family is in
both splits; split by task, a share of the tasks. The held-out ones are those whose
sha256("<suite name>:<family or task id>") sorts first: a re-import under the same name holds out
the same, another name its own. At least one is held out and one kept wherever there are two. A
task with its own split (train, validation or test) keeps it, and the unsplit tasks of its family
follow: held out (test) only when every task of the family that has a split is held out.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from clawgym.tasks.model import Task, TaskFormatError

SUITE_FILE = "suite.json"
SPLITS_KEY = "task_splits"  # suite.json: task id → train | test, as the import assigned it
FAMILIES_KEY = "task_families"  # suite.json: task id → family
SPLITS = ("train", "test")  # what an import assigns
HELD_OUT = frozenset({"test", "validation"})  # a task's own splits that keep it out of training
_NUMBERED = re.compile(r"^(.+?)[-_]\d+$")

SplitBy = Literal["family", "task"]


def family_of(task: Task) -> str:
    """The task's family: its metadata's `family`, else its id without a trailing `-N` / `_N`."""
    named = task.metadata.get("family")
    if named is not None and str(named):
        return str(named)
    numbered = _NUMBERED.match(task.id)
    return numbered.group(1) if numbered else task.id


@dataclass(frozen=True)
class SplitRule:
    """How `tasks import` splits a suite: by family or by task, holding out `held_out` of them."""

    by: SplitBy = "family"
    held_out: float = 0.25

    def __post_init__(self) -> None:
        if self.by not in ("family", "task"):
            raise TaskFormatError(f"split by {self.by!r}: family or task")
        if not 0.0 < self.held_out < 1.0:
            raise TaskFormatError(f"held-out share {self.held_out}: a fraction between 0 and 1")


@dataclass(frozen=True)
class SuiteSplit:
    """What `assign_split` chose: the splits it assigned (tasks without their own), every family."""

    rule: SplitRule | None  # None: the import split nothing (--no-split)
    seed: str
    splits: Mapping[str, str]  # task id → train | test, for the tasks the import assigned
    families: Mapping[str, str]  # task id → family, every task
    own: Mapping[str, str]  # task id → the split the task carries itself
    note: str = ""  # why nothing was held out, where nothing was

    def split_of(self, task_id: str) -> str:
        return self.own.get(task_id) or self.splits.get(task_id, "")

    def families_in(self, split: str) -> list[str]:
        return sorted({f for t, f in self.families.items() if self.split_of(t) == split})

    def as_json(self) -> dict[str, object]:
        """The summary `suite.json` and `tasks import --json` carry (the maps are apart)."""
        counts = {s: sum(self.split_of(t) == s for t in self.families) for s in SPLITS}
        return {
            "by": self.rule.by if self.rule else "none",
            "held_out": self.rule.held_out if self.rule else 0.0,
            "seed": self.seed,
            **counts,
            "unsplit": len(self.families) - counts["train"] - counts["test"],
            "kept": len(self.own),
            "families": len(set(self.families.values())),
            "test_families": self.families_in("test"),
            "note": self.note,
        }


def assign_split(tasks: Sequence[Task], seed: str, rule: SplitRule | None) -> SuiteSplit:
    """The split of `tasks` under `rule`, seeded by `seed` (the suite's name); None splits nothing."""
    families = {t.id: family_of(t) for t in tasks}
    own = {t.id: t.split for t in tasks if t.split}
    if rule is None:
        return SuiteSplit(None, seed, {}, families, own, "not split (--no-split)")
    unsplit = [t.id for t in tasks if not t.split]
    if rule.by == "task":
        keys = {t: t for t in unsplit}
        followed: dict[str, str] = {}
    else:
        # a family some of whose tasks carry a split already: its other tasks follow it
        fixed: dict[str, set[str]] = {}
        for task_id, split in own.items():
            fixed.setdefault(families[task_id], set()).add(split)
        followed = {t: "test" if fixed[families[t]] <= HELD_OUT else "train" for t in unsplit
                    if families[t] in fixed}  # fmt: skip
        keys = {t: families[t] for t in unsplit if t not in followed}
    held = _held_out(sorted(set(keys.values())), seed, rule.held_out)
    if not held and keys:
        what = "family" if rule.by == "family" else "task"
        note = f"one {what} to split only: nothing held out" + (
            " (--split-by task splits its tasks)" if rule.by == "family" else ""
        )
        return SuiteSplit(rule, seed, followed, families, own, note)
    splits = {**followed, **{t: "test" if key in held else "train" for t, key in keys.items()}}
    return SuiteSplit(rule, seed, splits, families, own)


def _held_out(keys: list[str], seed: str, share: float) -> set[str]:
    """The `share` of `keys` (at least one, and one kept, where there are two) that sort first by
    sha256(seed:key)."""
    if len(keys) < 2:
        return set()
    n = min(max(1, int(share * len(keys) + 0.5)), len(keys) - 1)
    ranked = sorted(keys, key=lambda k: hashlib.sha256(f"{seed}:{k}".encode()).hexdigest())
    return set(ranked[:n])


def suite_json_fields(split: SuiteSplit) -> dict[str, object]:
    """What `suite.json` records of the split: its summary and the two maps the loader applies."""
    return {
        "split": split.as_json(),
        SPLITS_KEY: dict(sorted(split.splits.items())),
        FAMILIES_KEY: dict(sorted(split.families.items())),
    }


@dataclass(frozen=True)
class Recorded:
    """The splits and families a suite folder's suite.json records (empty where it records none)."""

    splits: Mapping[str, str]
    families: Mapping[str, str]

    def apply(self, task: Task) -> Task:
        """`task` with the recorded split and family where it carries none of its own."""
        split = task.split or self.splits.get(task.id, "")
        family = self.families.get(task.id) if not task.metadata.get("family") else None
        if split == task.split and family is None:
            return task
        metadata = {**task.metadata, "family": family} if family is not None else task.metadata
        return dataclasses.replace(task, split=split, metadata=metadata)


NOTHING = Recorded({}, {})


def read_recorded(folder: Path) -> Recorded:
    """The splits and families `folder`/suite.json records; TaskFormatError when they are malformed."""
    path = Path(folder) / SUITE_FILE
    if not path.is_file():
        return NOTHING
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise TaskFormatError(f"{path}: not readable JSON ({e})") from e
    if not isinstance(meta, dict):
        return NOTHING
    splits, families = meta.get(SPLITS_KEY, {}), meta.get(FAMILIES_KEY, {})
    if not _str_map(splits) or not set(splits.values()) <= set(SPLITS):
        raise TaskFormatError(f"{path}: {SPLITS_KEY} must map task ids to train or test")
    if not _str_map(families):
        raise TaskFormatError(f"{path}: {FAMILIES_KEY} must map task ids to family names")
    return Recorded(splits, families) if splits or families else NOTHING


def _str_map(value: object) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    )
