"""Imports suites: the tasks of a folder or git repository, each reported, copied into a suite.

`plan_import` finds and loads every task folder under the source (its layout detected per folder
by `loader`, or only one format) and reports each (`support`): `ok`, `caveats`, `unsupported`
(still imported: the reason is per backend, and another backend may run it), `broken` (not
imported: the load error names the task's folder and file) or `skipped` (another format than
asked). `write_suite` then copies the loadable ones; with `strict`, one broken task refuses the
whole import. Nothing is written until every task has been read. Running tasks is not done here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from clawgym.errors import AlreadyExists, InvalidArgument
from clawgym.tasks.clawgym_jsonl import convert_jsonl
from clawgym.tasks.git_source import GIT_CACHE_DIR, checkout, parse_source
from clawgym.tasks.loader import FoundTask, scan_tasks
from clawgym.tasks.suites import BUNDLED, SUITES_DIR, SuiteInfo
from clawgym.tasks.support import TaskReport, report_task

MARKERS = "data_entry.json (clawgym), task.yaml (terminal-bench), task.toml or instruction.md (harbor)"


@dataclass(frozen=True)
class ImportPlan:
    """What importing a source would do; `found[i]` is reported by `reports[i]`."""

    source: str  # the source as given (a git URL without its password)
    folder: Path  # the folder the tasks were found under (a git source's checkout)
    commit: str  # a git source's commit; "" for a folder
    default_name: str
    found: tuple[FoundTask, ...]
    reports: tuple[TaskReport, ...]

    @property
    def importable(self) -> list[FoundTask]:
        return [f for f in self.found if f.task is not None]

    def summary(self) -> dict[str, int]:
        """The figures `tasks import --json` ends with."""
        counts = Counter(r.status for r in self.reports)
        return {
            "found": len(self.reports),
            "imported": len(self.importable),
            **{status: counts[status] for status in ("ok", "caveats", "unsupported", "broken", "skipped")},
        }


def plan_import(src: str | Path, fmt: str | None = None, cache_dir: str | Path | None = None) -> ImportPlan:
    """Reads every task of `src` (a folder, a task folder, or a git source: `git_source`)."""
    git = parse_source(str(src)) if isinstance(src, str) else None
    if git is not None:
        got = checkout(git, cache_dir)
        folder, commit, shown = got.path, got.commit, git.shown()
        default_name = Path(git.path).name if git.path else _repo_name(git.url)
    elif Path(src).is_file() and Path(src).suffix == ".jsonl":  # ClawGym-Bench's task rows
        folder, commit, shown = _converted_rows(Path(src), cache_dir), "", str(Path(src).resolve())
        default_name = Path(src).stem
    else:
        folder, commit, shown = Path(src), "", str(Path(src).resolve())
        if not folder.is_dir():
            raise InvalidArgument(f"{src}: not a folder, nor a git source (git+…, https://…, user@host:…)")
        default_name = folder.resolve().name
    found = scan_tasks(folder, fmt)
    if not found:
        raise InvalidArgument(f"{shown}: no task folders (a task folder holds {MARKERS})")
    found = _mark_unsafe(found, folder)
    reports = tuple(report_task(f, _relative(f.path, folder)) for f in found)
    return ImportPlan(shown, folder, commit, default_name, tuple(found), reports)


def write_suite(
    plan: ImportPlan,
    root: str | Path | None = None,
    name: str | None = None,
    replace: bool = False,
    strict: bool = False,
) -> SuiteInfo:
    """Copies the plan's loadable tasks into the suite `name` under `root`, with `suite.json`.

    InvalidArgument when nothing loads, or (strict) when any task is broken; AlreadyExists when
    the suite exists and not `replace`. The copy is made beside the suite and renamed into place,
    so a failed import leaves no half suite and an old suite is replaced whole.
    """
    broken = [(r.path, r.reason) for r in plan.reports if r.status == "broken"]
    if strict and broken:
        lines = "; ".join(f"{path}: {reason}" for path, reason in broken)
        raise InvalidArgument(
            f"{plan.source}: {len(broken)} broken task(s), nothing imported (strict): {lines}"
        )
    tasks = plan.importable
    if not tasks:
        raise InvalidArgument(f"{plan.source}: no task loads, nothing to import")
    name = name or plan.default_name
    if name in BUNDLED or "/" in name or name.startswith(".") or not name:
        raise InvalidArgument(f"{name!r} cannot name an imported suite")
    root = Path(root) if root is not None else SUITES_DIR
    dest = root / name
    if dest.exists() and not replace:
        raise AlreadyExists(f"suite {name!r} exists at {dest} (use replace)")
    staging = root / f".{name}.importing"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    try:
        for found in tasks:
            rel = _relative(found.path, plan.folder)
            shutil.copytree(found.path, staging / (found.path.name if rel == "." else rel), symlinks=True)
        formats = sorted({f.format for f in tasks})
        meta = {
            "name": name,
            "format": formats[0] if len(formats) == 1 else "mixed",
            "tasks": len(tasks),
            "source": plan.source,
            "commit": plan.commit,
            "unsupported": sum(r.status == "unsupported" for r in plan.reports),
            "broken": len(broken),
            "report": [r.as_json() for r in plan.reports],
        }
        (staging / "suite.json").write_text(json.dumps(meta, indent=2) + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        staging.rename(dest)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return SuiteInfo(name, dest, meta["format"], len(tasks))


def _converted_rows(src: Path, cache_dir: str | Path | None) -> Path:
    """The task folders of a ClawGym `.jsonl` (`clawgym_jsonl`), converted once per content into
    the cache beside the git checkouts (a bad row raises, naming its line, before anything is written)."""
    digest = hashlib.sha256(src.read_bytes()).hexdigest()[:16]
    cache = (Path(cache_dir) if cache_dir is not None else GIT_CACHE_DIR).parent / "jsonl"
    folder = cache / f"{src.stem}-{digest}"
    if not folder.is_dir():
        staging = cache / f".{folder.name}.{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        try:
            convert_jsonl(src, staging)
            staging.rename(folder)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return folder


def _mark_unsafe(found: list[FoundTask], folder: Path) -> list[FoundTask]:
    """Turns into broken tasks those a suite must not hold: a second task with an id already
    taken (a suite names its tasks by id), and a task with a symlink leading out of its folder
    (the copy would point at the host's files, or at nothing)."""
    owner: dict[str, Path] = {}
    out = []
    for entry in found:
        error = None
        if entry.task is not None:
            error = _escaping_link(entry.path)
            if error is None and entry.task.id in owner:
                other = _relative(owner[entry.task.id], folder)
                error = f"{entry.path}: task id {entry.task.id!r} is also the id of {other}"
            if error is None:
                owner[entry.task.id] = entry.path
        out.append(entry if error is None else dataclasses.replace(entry, task=None, error=error))
    return out


def _escaping_link(task_dir: Path) -> str | None:
    top = task_dir.resolve()
    for dirpath, dirnames, filenames in os.walk(task_dir):
        for entry in (*dirnames, *filenames):
            path = Path(dirpath) / entry
            if path.is_symlink():
                target = path.resolve()
                if target != top and top not in target.parents:
                    return (
                        f"{task_dir}: the symlink {path.relative_to(task_dir)} leads out of the task folder"
                    )
    return None


def _relative(path: Path, folder: Path) -> str:
    return Path(os.path.relpath(path, folder)).as_posix()


def _repo_name(url: str) -> str:
    """`org/repo.git` → `repo` (the last path part of a URL, scp-like address or local path)."""
    last = url.rstrip("/").replace(":", "/").rsplit("/", 1)[-1]
    return last.removesuffix(".git") or "suite"
