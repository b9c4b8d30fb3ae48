"""Task suites: named folders of tasks. The bundled `mini` suite, plus suites imported by the user.

An imported suite is `<suites root>/<name>/` holding a copy of each task folder that loaded (at
its path under the source) and `suite.json` (name, format or `mixed`, task count, where it came
from, the import's report per task, its held-out split and each task's family: `splits`);
`suite_import` writes it. A suite can also be named by any folder path.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from clawgym.errors import NotFound
from clawgym.tasks.loader import load_task
from clawgym.tasks.mini.generate import mini_suite_dir

SUITES_DIR = Path.home() / ".local" / "share" / "clawgym" / "suites"
BUNDLED = ("mini",)


@dataclass(frozen=True)
class SuiteInfo:
    name: str
    path: Path
    format: str
    tasks: int
    split: dict | None = None  # the held-out split's summary (`splits.SuiteSplit.as_json`), if recorded


def resolve_suite(name: str, root: str | Path | None = None, cache_dir: str | Path | None = None) -> Path:
    """The folder of a suite: `mini` (generated on first use), an imported suite's name, or a path."""
    if name == "mini":
        return mini_suite_dir(cache_dir)
    root = Path(root) if root is not None else SUITES_DIR
    if (root / name / "suite.json").is_file():
        return root / name
    if Path(name).is_dir():
        return Path(name)
    raise NotFound(f"no suite {name!r}: not bundled ({', '.join(BUNDLED)}), not in {root}, not a folder")


def resolve_task(task: str, suite: str) -> tuple[str, str]:
    """(suite, task id) of a task named on the command line: a task folder is a suite of one task
    (its resolved path); anything else is a task id of `suite`."""
    path = Path(task)
    if path.is_dir():
        return str(path.resolve()), load_task(path).id
    return suite, task


def suite_of(task_dir: Path) -> tuple[str, bool]:
    """(name, imported) of the suite a task folder belongs to: the nearest folder above it holding
    suite.json is an imported suite (a third party's tasks, `suite_import`), named by that folder;
    otherwise the suite is the folder the task sits in, its author's."""
    task_dir = Path(task_dir).resolve()
    for folder in task_dir.parents:
        if (folder / "suite.json").is_file():
            return folder.name, True
    return task_dir.parent.name, False


def _info(path: Path, name: str) -> SuiteInfo:
    meta = json.loads((path / "suite.json").read_text())
    split = meta.get("split") if isinstance(meta.get("split"), dict) else None
    return SuiteInfo(name, path, meta.get("format", "?"), int(meta.get("tasks", 0)), split)


def list_suites(root: str | Path | None = None, cache_dir: str | Path | None = None) -> list[SuiteInfo]:
    """The bundled suites, then every imported one under `root`."""
    root = Path(root) if root is not None else SUITES_DIR
    found = [_info(mini_suite_dir(cache_dir), "mini")]
    if root.is_dir():
        found += [_info(p, p.name) for p in sorted(root.iterdir()) if (p / "suite.json").is_file()]
    return found
