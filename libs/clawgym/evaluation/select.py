"""Which tasks an evaluation uses: a suite's split, cut to n tasks spread evenly over task families.

Owns the choice only (deterministic: the same suite and n give the same tasks). A family is the
task's `metadata["family"]` (the mini suite sets it); tasks without one form one family.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from clawgym.errors import InvalidArgument
from clawgym.tasks.model import Task


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


def eval_tasks(suite: str, n: int = 0, split: str = "test") -> list[Task]:
    """`n` runnable tasks of the suite's `split` (every split when it has none of that name), spread."""
    from clawgym.tasks.loader import load_tasks
    from clawgym.tasks.suites import resolve_suite

    tasks = load_tasks(resolve_suite(suite), split=split or None)
    if not tasks and split:
        tasks = load_tasks(resolve_suite(suite))
    tasks = [t for t in tasks if not t.unsupported]
    if not tasks:
        raise InvalidArgument(
            f"suite {suite!r} has no runnable task{f' in split {split!r}' if split else ''}"
        )
    return spread(tasks, n)
