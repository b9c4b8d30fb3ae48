"""What evaluated tasks share with the tasks a run trains on, as the suite's own data shows it.

The report prints it beside each held-out figure. Only facts the loaded tasks hold are stated: the
family (`metadata.family`, or the one an import recorded), instructions equal to a training task's,
reference solutions whose files equal a training task's, and the values of the metadata keys that
say how a task was written (`DESCRIBING`) where the suite records them; a key it records nowhere is
named as unknown, not guessed. Per evaluated family, what its shell solutions share with the
training tasks' (`tasks.commands`): programs, flags and answer shapes. A family with no training
task that runs a trained family's program or has a training task's answer shape is a *sibling*
family, not a new skill, and is labelled so (`unseen_label`). Which harnesses are trained through
comes from the run's config. This module reads task files (solutions) but runs nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from clawgym.tasks.commands import CommandParts, command_parts
from clawgym.tasks.model import Task

DESCRIBING = ("template", "phrasing", "category")  # metadata keys naming how a task was written


@dataclass(frozen=True)
class FamilyShare:
    """One evaluated family's shell solutions against the training tasks' solutions."""

    solutions: int  # its tasks with a shell solution to read
    programs: tuple[str, ...] = ()  # programs its solutions run that a training solution runs too
    flags: tuple[str, ...] = ()  # ... flags likewise
    same_shape: int = 0  # its tasks whose answer shape a training task has

    @property
    def sibling(self) -> bool:
        return bool(self.programs or self.same_shape)

    def as_json(self) -> dict:
        return {"sibling": self.sibling, "programs": list(self.programs), "flags": list(self.flags),
                "same_shape": self.same_shape, "solutions": self.solutions}  # fmt: skip


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
    # evaluated families with no training task, with shell solutions
    by_family: dict[str, FamilyShare] = field(default_factory=dict)

    def siblings(self) -> list[str]:
        return [f for f, share in self.by_family.items() if share.sibling]


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
        by_family=_family_shares(train, evaluated, family_of),
    )


def _family_shares(
    train: Sequence[Task], evaluated: Sequence[Task], family_of: dict[str, str]
) -> dict[str, FamilyShare]:
    """What the shell solutions of each evaluated family with no training task share with training's
    (a trained family shares its own programs by definition: it is left out)."""
    trained_families = {family_of[t.id] for t in train}
    untrained = [t for t in evaluated if family_of[t.id] not in trained_families]
    trained = [p for t in train if (p := _shell_solution(t)) is not None] if untrained else []
    if not trained:
        return {}
    programs = frozenset().union(*(p.programs for p in trained))
    flags = frozenset().union(*(p.flags for p in trained))
    shapes = {p.shape for p in trained}
    mine: dict[str, list[CommandParts]] = {}
    for t in untrained:
        if (parts := _shell_solution(t)) is not None:
            mine.setdefault(family_of[t.id], []).append(parts)
    return {
        family: FamilyShare(
            solutions=len(parts),
            programs=tuple(sorted(frozenset().union(*(p.programs for p in parts)) & programs)),
            flags=tuple(sorted(frozenset().union(*(p.flags for p in parts)) & flags)),
            same_shape=sum(p.shape in shapes for p in parts),
        )
        for family, parts in sorted(mine.items())
    }


def unseen_label(s: Shared) -> str:
    """What to call families with no training task, by what their solutions share with training's:
    `sibling families`, `new-skill families`, a mix with its count, or `unseen families` where no
    shell solution tells."""
    if not s.by_family:
        return "unseen families"
    siblings = len(s.siblings())
    if siblings == len(s.by_family):
        return "sibling families"
    if siblings == 0:
        return "new-skill families"
    return f"unseen families ({siblings} of {len(s.by_family)} siblings)"


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
    if kind != "trained" and s.by_family:
        siblings = s.siblings()
        if siblings:
            shared.append(
                f"a program or answer shape of a trained family's solutions, in {len(siblings)} of the "
                f"{len(s.by_family)} families (siblings: {'; '.join(_sibling(f, s.by_family[f]) for f in siblings)})"
            )
        if len(siblings) < len(s.by_family):
            new = [f for f in s.by_family if f not in siblings]
            apart.append(f"any program, flag or answer shape of training, in {', '.join(new)} (new skills)")
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


def _sibling(family: str, share: FamilyShare) -> str:
    what = [" ".join(share.programs + share.flags)] if share.programs or share.flags else []
    if share.same_shape:
        what.append(f"the answer shape of {share.same_shape} of {share.solutions}")
    return f"{family}: {', '.join(what)}"


def _shell_solution(task: Task) -> CommandParts | None:
    """The parts of a task's shell solution (its `.sh` files, in order), None without one."""
    texts = []
    for item in sorted(task.solution, key=lambda f: f.target):
        source = Path(item.source)
        files = (
            sorted(source.rglob("*.sh")) if source.is_dir() else [source] if source.suffix == ".sh" else []
        )
        for path in files:
            try:
                texts.append(path.read_text())
            except (OSError, UnicodeDecodeError):
                return None
    return command_parts("\n".join(texts)) if texts else None


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
