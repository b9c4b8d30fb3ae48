"""Finds tasks on disk: which format a folder is in, and every task under a folder.

One entry per format in `FORMATS` (name → detector, loader); `load_task` tries them in order
unless told the format. A folder is a task folder when a detector knows its marker file, first
match wins: `data_entry.json` (clawgym), `task.yaml` (terminal-bench), `task.toml` or
`instruction.md` (harbor). `load_tasks` stops at the first task that does not load; `scan_tasks`
loads every task it can and says why each other one does not. Both apply the split and family a
suite folder's suite.json records (`splits`: an imported suite's held-out split). Loading never
runs anything from the task.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from clawgym.tasks.clawgym_format import is_clawgym_task, load_clawgym_task
from clawgym.tasks.harbor import is_harbor_task, load_harbor_task
from clawgym.tasks.model import Task, TaskFormatError
from clawgym.tasks.splits import read_recorded
from clawgym.tasks.terminal_bench import is_terminal_bench_task, load_terminal_bench_task

FORMATS: dict[str, tuple[Callable[[Path], bool], Callable[[Path], Task]]] = {
    "clawgym": (is_clawgym_task, load_clawgym_task),
    "terminal-bench": (is_terminal_bench_task, load_terminal_bench_task),
    "harbor": (is_harbor_task, load_harbor_task),
}
ALIASES = {"tb": "terminal-bench", "tb1": "terminal-bench", "tb2": "harbor", "terminal-bench-2": "harbor"}


def format_name(name: str) -> str:
    """The canonical format name; TaskFormatError lists the known ones."""
    name = ALIASES.get(name, name)
    if name not in FORMATS:
        raise TaskFormatError(f"unknown task format {name!r}; known: {', '.join(FORMATS)}")
    return name


def detect_format(path: Path) -> str | None:
    """The format of a task folder, or None when it is not a task folder."""
    for name, (detect, _) in FORMATS.items():
        if detect(path):
            return name
    return None


def load_task(path: str | Path, fmt: str | None = None) -> Task:
    """Loads one task folder, in `fmt` or whichever format it is in."""
    path = Path(path)
    if not path.is_dir():
        raise TaskFormatError(f"{path}: not a directory")
    name = format_name(fmt) if fmt else detect_format(path)
    if name is None:
        raise TaskFormatError(f"{path}: not a task folder in any known format ({', '.join(FORMATS)})")
    try:
        return FORMATS[name][1](path)
    except (OSError, ValueError, TypeError, AttributeError) as e:
        # A field of the wrong type or an unreadable file (float("abc"), a table given as a
        # string, bytes that are not UTF-8): still the task's fault, so name the task.
        raise TaskFormatError(f"{path}: malformed {name} task ({type(e).__name__}: {e})") from e


def _walk(folder: Path, seen: set[Path]) -> Iterator[Path]:
    """Task folders at or under `folder`, sorted; a task folder's own subfolders are not searched.
    `seen` holds the real paths already walked, so a symlinked folder loop ends."""
    real = folder.resolve()
    if real in seen:
        return
    seen.add(real)
    if detect_format(folder) is not None:
        yield folder
        return
    try:
        children = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return  # an unreadable folder holds no task we could load
    for child in children:
        yield from _walk(child, seen)


def task_dirs(root: str | Path) -> list[Path]:
    """Every task folder (any format) at or under `root`."""
    return list(_walk(Path(root), set()))


def find_task_dirs(root: str | Path, fmt: str | None = None) -> list[Path]:
    """Task folders at or under `root`, only those in `fmt` if given, sorted."""
    if fmt is None:
        return task_dirs(root)
    detect = FORMATS[format_name(fmt)][0]
    return [path for path in task_dirs(root) if detect(path)]


@dataclass(frozen=True)
class FoundTask:
    """One task folder found by `scan_tasks`: its task, or why it is not one.

    `error` is the load error (the folder is broken); `skipped` says why a folder that loads was
    left out (another format than the one asked for). At most one of `task`, `error`, `skipped`.
    """

    path: Path
    format: str
    task: Task | None = None
    error: str | None = None
    skipped: str | None = None

    @property
    def name(self) -> str:
        """The task id when it loaded, else the folder's name (what a broken task is called)."""
        return self.task.id if self.task is not None else self.path.name


def scan_tasks(root: str | Path, fmt: str | None = None) -> list[FoundTask]:
    """Every task folder under `root`, each loaded, its load error kept instead of raised.

    With `fmt`, a folder whose marker is only another format's is skipped (and says so); the
    format of every other folder is detected per folder (the module docstring says how).
    """
    wanted = format_name(fmt) if fmt else None
    recorded = read_recorded(Path(root))
    found = []
    for path in task_dirs(root):
        detected = detect_format(path) or ""
        if wanted is not None and not FORMATS[wanted][0](path):
            found.append(FoundTask(path, detected, skipped=f"a {detected} task, not {wanted}"))
            continue
        name = wanted or detected
        try:
            found.append(FoundTask(path, name, task=recorded.apply(load_task(path, name))))
        except TaskFormatError as e:
            found.append(FoundTask(path, name, error=str(e)))
    return found


def load_tasks(root: str | Path, fmt: str | None = None, split: str | None = None) -> list[Task]:
    """Every task under `root`, optionally only one split; TaskFormatError on the first bad one."""
    recorded = read_recorded(Path(root))
    tasks = [recorded.apply(load_task(path, fmt)) for path in find_task_dirs(root, fmt)]
    return [t for t in tasks if split is None or t.split == split]
