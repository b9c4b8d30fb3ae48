"""Which tasks a run trains and evaluates on: a suite's splits, cut to n tasks spread over task families.

Owns the choice only (deterministic: the same suite and n give the same tasks), and the evaluation
an `evaluation` config section asks for (`eval_spec`); not running it (`runner.py`). A family is the
task's `metadata["family"]` (the mini suite sets it); tasks without one form one family.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from clawgym.errors import InvalidArgument
from clawgym.evaluation.runner import EvalSpec
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


def train_and_held_out(suite: str, max_level: int = 0, held_out: int = 0) -> tuple[list[str], list[str]]:
    """(train, held-out) task ids: the suite's runnable tasks of its train and test splits (all tasks
    where a split is missing), at most `max_level` (tasks carrying a `level`; 0 = every level), the
    held-out ones cut to `held_out` spread over families (0 = all)."""
    from clawgym.tasks.loader import load_tasks
    from clawgym.tasks.suites import resolve_suite

    tasks = [t for t in load_tasks(resolve_suite(suite)) if not t.unsupported]
    if max_level:
        tasks = [t for t in tasks if int(t.metadata.get("level", 0) or 0) <= max_level]
    train = [t.id for t in tasks if t.split == "train"] or [t.id for t in tasks]
    test = [t for t in tasks if t.split == "test"] or tasks
    return train, [t.id for t in spread(test, held_out)]


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
