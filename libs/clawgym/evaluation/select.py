"""Which tasks a run trains and evaluates on: a suite's splits, cut to n tasks spread over task families.

Owns the choice only (deterministic: the same suite and n give the same tasks), and the evaluation
an `evaluation` config section asks for (`eval_spec`); not running it (`runner.py`). A family is the
task's `metadata["family"]` (the mini suite sets it); tasks without one form one family.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from clawgym.errors import InvalidArgument
from clawgym.evaluation.runner import EvalSpec
from clawgym.evaluation.shared import Shared, compare
from clawgym.tasks.model import Task

if TYPE_CHECKING:
    from clawgym.evaluation.config import EvaluationConfig


def spread(tasks: Sequence[Task], n: int = 0) -> list[Task]:
    """`n` tasks taken round-robin over families, in id order within each (n = 0 or >= len: all)."""
    if n <= 0 or n >= len(tasks):
        return sorted(tasks, key=lambda t: t.id)
    by_family: dict[str, list[Task]] = defaultdict(list)
    for t in sorted(tasks, key=lambda t: t.id):
        by_family[str(t.metadata.get("family", ""))].append(t)
    families = [by_family[f] for f in sorted(by_family)]
    chosen: list[Task] = []
    for i in range(max(len(f) for f in families)):
        for family in families:
            if i < len(family):
                chosen.append(family[i])
                if len(chosen) == n:
                    return chosen
    return chosen


def eval_tasks(suite: str, n: int = 0, split: str = "test", task_images: bool = False) -> list[Task]:
    """`n` tasks of the suite's `split` (every split when it has none of that name), spread, that
    the sandbox backend runs (`task_images`: it runs a task in its own image, as docker does)."""
    from clawgym.tasks.loader import load_tasks
    from clawgym.tasks.suites import resolve_suite

    tasks = load_tasks(resolve_suite(suite), split=split or None)
    if not tasks and split:
        tasks = load_tasks(resolve_suite(suite))
    tasks = [t for t in tasks if not t.unsupported_by(task_images)]
    if not tasks:
        raise InvalidArgument(
            f"suite {suite!r} has no runnable task{f' in split {split!r}' if split else ''}"
        )
    return spread(tasks, n)


def train_and_held_out(
    suite: str, max_level: int = 0, held_out: int = 0, unseen: int | None = None, split: str = "test"
) -> tuple[list[str], list[str]]:
    """(train, held-out) task ids: the suite's runnable tasks of its train and `split` splits (all
    tasks where one is missing; a missing `validation` split is an error, since falling back would
    tune on what test reports), at most `max_level` (tasks carrying a `level`; 0 = every level). The
    held-out ones are cut to `held_out` tasks of families with train tasks and `unseen` tasks of
    families without (each spread over families; 0 = all, None = the same cut as `held_out`)."""
    from clawgym.tasks.loader import load_tasks
    from clawgym.tasks.suites import resolve_suite

    tasks = [t for t in load_tasks(resolve_suite(suite)) if not t.unsupported]
    if max_level:
        tasks = [t for t in tasks if int(t.metadata.get("level", 0) or 0) <= max_level]
    train = [t for t in tasks if t.split == "train"] or tasks
    test = [t for t in tasks if t.split == split]
    if not test and split == "validation":
        raise InvalidArgument(f"suite {suite!r} has no validation split")
    test = test or tasks
    trained = {str(t.metadata.get("family", "")) for t in train}
    seen = [t for t in test if str(t.metadata.get("family", "")) in trained]
    new = [t for t in test if str(t.metadata.get("family", "")) not in trained]
    chosen = spread(seen, held_out) + spread(new, held_out if unseen is None else unseen)
    return [t.id for t in train], [t.id for t in chosen]


def eval_spec(
    e: EvaluationConfig, trainer_suite: str, trainer_harnesses: Sequence[str], task_images: bool = False
) -> EvalSpec:
    """The held-out evaluation the `evaluation` section asks for: its suite (default the trainer's),
    its task ids or `tasks` of its split spread over families, its harnesses (default every harness
    the trainer trains with, each once, so each is evaluated as it is trained)."""
    suite = e.suite or trainer_suite
    harnesses = e.harnesses or list(dict.fromkeys(trainer_harnesses))
    ids = list(e.task_ids) or [t.id for t in eval_tasks(suite, e.tasks, e.split, task_images)]
    return EvalSpec(suite, ids, harnesses, e.samples, e.ks)


@dataclass(frozen=True)
class HeldOut:
    """The evaluated tasks split by what they share with training: `trained` are held-out
    instances of families the run trains on, `unseen` the tasks of families it never trains on
    (a family is a task's `metadata["family"]`; tasks without one form one family)."""

    family_of: dict[str, str]  # evaluated task id → family
    kind_of: dict[str, str]  # evaluated task id → "trained" | "unseen"
    trained: frozenset[str] = frozenset()  # every family the run trains on
    shared: dict[str, Shared] = field(default_factory=dict)  # kind → what it shares with training

    def ids(self, kind: str) -> list[str]:
        return [t for t, k in self.kind_of.items() if k == kind]

    def families(self, kind: str) -> list[str]:
        return sorted({self.family_of[t] for t in self.ids(kind)})


def held_out(suite: str, train_ids: Sequence[str], eval_ids: Sequence[str]) -> HeldOut:
    """Which evaluated tasks belong to a family the run trains on (`train_ids`; none named = the
    suite's train split, or every task where it has none)."""
    from clawgym.tasks.loader import load_tasks
    from clawgym.tasks.suites import resolve_suite

    tasks = {t.id: t for t in load_tasks(resolve_suite(suite))}
    family = {t.id: str(t.metadata.get("family", "")) for t in tasks.values()}
    train = list(train_ids) or [t.id for t in tasks.values() if t.split == "train"] or list(tasks)
    trained = {family[t] for t in train if t in family}
    known = [t for t in eval_ids if t in family]
    kind_of = {t: "trained" if family[t] in trained else "unseen" for t in known}
    train_tasks, named = [tasks[t] for t in train if t in tasks], any(family.values())
    shared = {
        kind: compare(train_tasks, [tasks[t] for t in known if kind_of[t] == kind], family, named)
        for kind in dict.fromkeys(kind_of.values())
    }
    return HeldOut({t: family[t] for t in known}, kind_of, frozenset(trained), shared)
