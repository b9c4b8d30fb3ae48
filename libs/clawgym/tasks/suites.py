"""Task suites: named folders of tasks. The bundled `mini` suite, plus suites imported by the user.

An imported suite is `<suites root>/<name>/` holding a copy of each task folder and `suite.json`
(name, format, task count, where it came from). A suite can also be named by any folder path.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from clawgym.errors import AlreadyExists, InvalidArgument, NotFound
from clawgym.tasks.clawgym_jsonl import convert_jsonl
from clawgym.tasks.loader import find_task_dirs, format_name, load_task
from clawgym.tasks.mini.generate import mini_suite_dir

SUITES_DIR = Path.home() / ".local" / "share" / "clawgym" / "suites"
BUNDLED = ("mini",)


@dataclass(frozen=True)
class SuiteInfo:
    name: str
    path: Path
    format: str
    tasks: int


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


def _info(path: Path, name: str) -> SuiteInfo:
    meta = json.loads((path / "suite.json").read_text())
    return SuiteInfo(name, path, meta.get("format", "?"), int(meta.get("tasks", 0)))


def list_suites(root: str | Path | None = None, cache_dir: str | Path | None = None) -> list[SuiteInfo]:
    """The bundled suites, then every imported one under `root`."""
    root = Path(root) if root is not None else SUITES_DIR
    found = [_info(mini_suite_dir(cache_dir), "mini")]
    if root.is_dir():
        found += [_info(p, p.name) for p in sorted(root.iterdir()) if (p / "suite.json").is_file()]
    return found


def import_suite(
    fmt: str, src: str | Path, root: str | Path | None = None, name: str | None = None, replace: bool = False
) -> SuiteInfo:
    """Copies every task under `src` (in format `fmt`) into a suite; every task must load first.
    A ClawGym `.jsonl` of task rows (ClawGym-Bench's benchmark_data.jsonl) is converted first
    (`clawgym_jsonl`); the suite is named after the file."""
    fmt = format_name(fmt)
    src = Path(src)
    if fmt == "clawgym" and src.is_file() and src.suffix == ".jsonl":
        with tempfile.TemporaryDirectory(prefix="clawgym-import-") as tmp:
            folder = Path(tmp) / src.stem
            convert_jsonl(src, folder)
            info = import_suite(fmt, folder, root, name or src.stem, replace=replace)
        meta_path = info.path / "suite.json"
        meta = json.loads(meta_path.read_text())
        meta_path.write_text(json.dumps({**meta, "source": str(src.resolve())}, indent=2) + "\n")
        return info
    if not src.is_dir():
        raise InvalidArgument(f"{src}: not a directory")
    dirs = find_task_dirs(src, fmt)
    if not dirs:
        raise InvalidArgument(f"{src}: no {fmt} tasks found")
    tasks = [load_task(d, fmt) for d in dirs]  # fails before anything is copied
    name = name or src.resolve().name
    if name in BUNDLED or "/" in name or name.startswith("."):
        raise InvalidArgument(f"{name!r} cannot name an imported suite")
    folder_names = [d.name for d in dirs]
    if len(set(folder_names)) != len(folder_names) or src in dirs:
        raise InvalidArgument(f"{src}: task folders must be distinct subfolders with distinct names")
    dest = (Path(root) if root is not None else SUITES_DIR) / name
    if dest.exists():
        if not replace:
            raise AlreadyExists(f"suite {name!r} exists at {dest} (use replace)")
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for task_dir in dirs:
        shutil.copytree(task_dir, dest / task_dir.name, symlinks=True)
    meta = {
        "name": name,
        "format": fmt,
        "tasks": len(tasks),
        "source": str(src.resolve()),
        "unsupported": sum(t.unsupported is not None for t in tasks),
    }
    (dest / "suite.json").write_text(json.dumps(meta, indent=2) + "\n")
    return SuiteInfo(name, dest, fmt, len(tasks))
