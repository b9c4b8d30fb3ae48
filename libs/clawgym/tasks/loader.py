"""Finds tasks on disk: which format a folder is in, and every task under a folder.

One entry per format in `FORMATS` (name → detector, loader); `load_task` tries them in order
unless told the format. Loading never runs anything from the task.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from clawgym.tasks.clawgym_format import is_clawgym_task, load_clawgym_task
from clawgym.tasks.harbor import is_harbor_task, load_harbor_task
from clawgym.tasks.model import Task, TaskFormatError
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
    return FORMATS[name][1](path)


def find_task_dirs(root: str | Path, fmt: str | None = None) -> list[Path]:
    """Task folders at or under `root` (a task folder's own subfolders are not searched), sorted."""
    root = Path(root)
    detect = FORMATS[format_name(fmt)][0] if fmt else (lambda p: detect_format(p) is not None)
    if detect(root):
        return [root]
    found: list[Path] = []
    for child in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        found.extend(find_task_dirs(child, fmt))
    return found


def load_tasks(root: str | Path, fmt: str | None = None, split: str | None = None) -> list[Task]:
    """Every task under `root`, optionally only one split; TaskFormatError on the first bad one."""
    tasks = [load_task(path, fmt) for path in find_task_dirs(root, fmt)]
    return [t for t in tasks if split is None or t.split == split]
