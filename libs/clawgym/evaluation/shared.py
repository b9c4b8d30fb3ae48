"""What evaluated tasks share with the tasks a run trains on, as the suite's own data shows it.

The report prints it beside each held-out figure. Only facts the loaded tasks hold are stated: the
family (`metadata.family`, or the one an import recorded), instructions equal to a training task's,
reference solutions whose files equal a training task's, and the values of the metadata keys that
say how a task was written (`DESCRIBING`) where the suite records them; a key it records nowhere is
named as unknown, not guessed. Which harnesses are trained through comes from the run's config.
This module reads task files (solutions) but runs nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from clawgym.tasks.model import Task

DESCRIBING = ("template", "phrasing", "category")  # metadata keys naming how a task was written


@dataclass(frozen=True)
class Shared:
    """One set of evaluated tasks against the training tasks."""

    tasks: int
    families: tuple[str, ...]  # the evaluated tasks' families
    trained_families: int  # how many families the run trains on
    named_families: bool  # whether any task of the suite names its family
    same_instruction: tuple[str, ...] = ()  # evaluated ids whose instruction a training task has too
    solutions: int = 0  # evaluated tasks with a reference solution
    same_solution: tuple[str, ...] = ()  # ... whose solution files a training task has too
    # metadata key → (evaluated tasks whose value a training task has too, evaluated tasks recording it)
    recorded: dict[str, tuple[int, int]] = field(default_factory=dict)


def compare(
    train: Sequence[Task], evaluated: Sequence[Task], family_of: dict[str, str], named_families: bool
) -> Shared:
    """What `evaluated` shares with `train` (`family_of`: task id → family, for both)."""
    instructions = {t.instruction.strip() for t in train}
    solutions = {_solution_digest(t) for t in train if t.has_solution}
    recorded: dict[str, tuple[int, int]] = {}
    for key in DESCRIBING:
        trained_values = {v for t in train if (v := _described(t, key)) is not None}
        values = [v for t in evaluated if (v := _described(t, key)) is not None]
        if values:
            recorded[key] = (sum(v in trained_values for v in values), len(values))
    with_solution = [t for t in evaluated if t.has_solution]
    return Shared(
        tasks=len(evaluated),
        families=tuple(sorted({family_of[t.id] for t in evaluated})),
        trained_families=len({family_of[t.id] for t in train}),
        named_families=named_families,
        same_instruction=tuple(t.id for t in evaluated if t.instruction.strip() in instructions),
        solutions=len(with_solution),
        same_solution=tuple(t.id for t in with_solution if _solution_digest(t) in solutions),
        recorded=recorded,
    )


def describe(kind: str, s: Shared, untrained_harnesses: Sequence[str] = ()) -> str:
    """The report's sentence for one set: `kind` is "trained" (held-out tasks of trained families)
    or "unseen" (families with no training task); `untrained_harnesses` are evaluated, not trained."""
    if kind == "trained":
        of = _n(s.trained_families, "family")
        head = f"{_n(s.tasks, 'held-out task')} of {len(s.families)} of the {of} trained on"
        if not s.named_families:
            head += " (the suite names no families, metadata.family: all its tasks count as one)"
    else:
        head = f"{_n(s.tasks, 'task')} of {_n(len(s.families), 'family')} with no training task"
        head += f" ({', '.join(s.families)})"
    shared, apart = (["their family"], []) if kind == "trained" else ([], ["any family"])
    if untrained_harnesses:
        shared.append(
            f"the harness prompt, except for {', '.join(untrained_harnesses)} (not trained through)"
        )
    else:
        shared.append("the harness prompt (every evaluated harness is trained through)")
    if s.same_instruction:
        shared.append(f"the instruction of {len(s.same_instruction)} ({_some(s.same_instruction)})")
    else:
        apart.append("any instruction (none equals a training task's)")
    if s.same_solution:
        shared.append(f"the reference solution of {len(s.same_solution)} ({_some(s.same_solution)})")
    elif s.solutions:
        apart.append(f"any reference solution (none of the {s.solutions} equals a training task's)")
    for key, (same, of) in s.recorded.items():
        if same:
            shared.append(f"the {key} of {same} of the {of} recording one")
        else:
            apart.append(f"any {key} (of the {of} recording one)")
    unknown = [k for k in DESCRIBING if k not in s.recorded]
    text = f"{head}. Shared with training: {'; '.join(shared)}."
    if apart:
        text += f" Not shared: {'; '.join(apart)}."
    if unknown:
        text += f" Unknown (the suite's metadata records none): {', '.join(unknown)}."
    return text


def _n(n: int, noun: str) -> str:
    plural = noun[:-1] + "ies" if noun.endswith("y") else noun + "s"
    return f"{n} {noun if n == 1 else plural}"


def _some(ids: Sequence[str], n: int = 3) -> str:
    return ", ".join(ids[:n]) + (f" and {len(ids) - n} more" if len(ids) > n else "")


def _described(task: Task, key: str) -> str | None:
    """A describing metadata value, at the top or in a nested `metadata` (ClawGym-Bench rows)."""
    nested = task.metadata.get("metadata")
    value = task.metadata.get(key, nested.get(key) if isinstance(nested, dict) else None)
    return None if value in (None, "") else str(value)


def _solution_digest(task: Task) -> str:
    """sha256 over the task's solution files (sandbox path and bytes of each)."""
    digest = hashlib.sha256()
    for item in sorted(task.solution, key=lambda f: f.target):
        source = Path(item.source)
        files = sorted(p for p in source.rglob("*") if p.is_file()) if source.is_dir() else [source]
        for path in files:
            rel = path.relative_to(source).as_posix() if source.is_dir() else ""
            digest.update(f"{item.target}/{rel}\0".encode())
            try:
                digest.update(path.read_bytes())
            except OSError:
                digest.update(b"\0unreadable")
            digest.update(b"\0")
    return digest.hexdigest()
