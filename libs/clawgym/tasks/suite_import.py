"""Imports suites: the tasks of a folder or git repository, each reported, copied into a suite.

`plan_import` finds and loads every task folder under the source (its layout detected per folder
by `loader`, or only one format) and reports each (`support`): `ok`, `caveats`, `unsupported`
(still imported: the reason is per backend, and another backend may run it), `broken` (not
imported: the load error names the task's folder and file; a `.jsonl` row that is not a task
names its line) or `skipped` (another format than asked). A task the suite cannot hold safely (a
second task with the same id, a symlink out of its folder or in a loop, a folder named like the
suite's own file) is broken too; one bad task never stops the others. `write_suite` then copies
the loadable ones and records their held-out split (`splits`: by family unless told otherwise,
seeded by the suite's name) in suite.json; with `strict`, one broken task refuses the whole import.
Nothing is written until every task has been read. Running tasks is not done here.
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
from clawgym.tasks.clawgym_jsonl import BadRow, convert_rows
from clawgym.tasks.git_source import GIT_CACHE_DIR, checkout, parse_source
from clawgym.tasks.loader import FoundTask, scan_tasks
from clawgym.tasks.splits import SUITE_FILE, SplitRule, assign_split, suite_json_fields
from clawgym.tasks.suites import BUNDLED, SUITES_DIR, SuiteInfo
from clawgym.tasks.support import TaskReport, report_task

BAD_ROWS = ".bad-rows.json"  # in a converted .jsonl's folder: its rows that are not tasks
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
    bad_rows: list[BadRow] = []
    if git is not None:
        got = checkout(git, cache_dir)
        folder, commit, shown = got.path, got.commit, git.shown()
        default_name = Path(git.path).name if git.path else _repo_name(git.url)
    elif Path(src).is_file() and Path(src).suffix == ".jsonl":  # ClawGym-Bench's task rows
        folder, bad_rows = _converted_rows(Path(src), cache_dir)
        commit, shown, default_name = "", str(Path(src).resolve()), Path(src).stem
    else:
        folder, commit, shown = Path(src), "", str(Path(src).resolve())
        if not folder.is_dir():
            raise InvalidArgument(f"{src}: not a folder, nor a git source (git+…, https://…, user@host:…)")
        default_name = folder.resolve().name
    found = scan_tasks(folder, fmt)
    # a row that is not a task is reported as one broken task, named by its line
    found += [FoundTask(folder / f"{Path(src).name}:{b.line}", "clawgym", error=b.error) for b in bad_rows]
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
    split: SplitRule | None = SplitRule(),  # frozen: one shared default is safe
) -> SuiteInfo:
    """Copies the plan's loadable tasks into the suite `name` under `root`, with `suite.json`
    recording their held-out split under `split` (None: none assigned; a task's own split is kept).

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
            try:
                shutil.copytree(found.path, staging / _suite_path(found.path, plan.folder), symlinks=True)
            except (OSError, shutil.Error) as e:  # a file that vanished or cannot be read since the plan
                raise InvalidArgument(f"{found.path}: cannot be copied into the suite ({e})") from e
        formats = sorted({f.format for f in tasks})
        held_out = assign_split([f.task for f in tasks if f.task is not None], name, split)
        meta = {
            "name": name,
            "format": formats[0] if len(formats) == 1 else "mixed",
            "tasks": len(tasks),
            "source": plan.source,
            "commit": plan.commit,
            "unsupported": sum(r.status == "unsupported" for r in plan.reports),
            "broken": len(broken),
            "report": [r.as_json() for r in plan.reports],
            **suite_json_fields(held_out),
        }
        (staging / SUITE_FILE).write_text(json.dumps(meta, indent=2) + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        staging.rename(dest)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return SuiteInfo(name, dest, meta["format"], len(tasks), held_out.as_json())


def _converted_rows(src: Path, cache_dir: str | Path | None) -> tuple[Path, list[BadRow]]:
    """The task folders of a ClawGym `.jsonl` (`clawgym_jsonl`), converted once per content into
    the cache beside the git checkouts, and its rows that are not tasks (kept in the folder's
    BAD_ROWS, so a cached conversion reports them again)."""
    digest = hashlib.sha256(src.read_bytes()).hexdigest()[:16]
    cache = (Path(cache_dir) if cache_dir is not None else GIT_CACHE_DIR).parent / "jsonl"
    folder = cache / f"{src.stem}-{digest}"
    if not folder.is_dir():
        staging = cache / f".{folder.name}.{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        try:
            _, bad = convert_rows(src, staging)
            (staging / BAD_ROWS).write_text(json.dumps([dataclasses.asdict(b) for b in bad]))
            staging.rename(folder)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    marker = folder / BAD_ROWS  # absent in a conversion cached before bad rows were kept: it had none
    return folder, [BadRow(**b) for b in json.loads(marker.read_text())] if marker.is_file() else []


def _mark_unsafe(found: list[FoundTask], folder: Path) -> list[FoundTask]:
    """Turns into broken tasks those a suite must not hold: a second task with an id already
    taken (a suite names its tasks by id), a task with a symlink leading out of its folder (the
    copy would point at the host's files, or at nothing) or in a loop, and a task whose folder
    would be the suite's own suite.json."""
    owner: dict[str, Path] = {}
    out = []
    for entry in found:
        error = None
        if entry.task is not None:
            error = _escaping_link(entry.path)
            if error is None and _suite_path(entry.path, folder) == SUITE_FILE:
                error = f"{entry.path}: a task folder named {SUITE_FILE} would be the suite's own file"
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
                try:
                    target = path.resolve(strict=True)
                except FileNotFoundError:
                    target = path.resolve()  # a dangling link: where it points is what counts
                except (RuntimeError, OSError):  # ELOOP; RuntimeError: Python < 3.13's "Symlink loop"
                    return f"{task_dir}: the symlink {path.relative_to(task_dir)} is a loop"
                if target != top and top not in target.parents:
                    return (
                        f"{task_dir}: the symlink {path.relative_to(task_dir)} leads out of the task folder"
                    )
    return None


def _suite_path(task_dir: Path, folder: Path) -> str:
    """Where a task's folder goes in the suite: its path under the source (its name when the source
    is the task folder itself)."""
    rel = _relative(task_dir, folder)
    return task_dir.name if rel == "." else rel


def _relative(path: Path, folder: Path) -> str:
    return Path(os.path.relpath(path, folder)).as_posix()


def _repo_name(url: str) -> str:
    """`org/repo.git` → `repo` (the last path part of a URL, scp-like address or local path)."""
    last = url.rstrip("/").replace(":", "/").rsplit("/", 1)[-1]
    return last.removesuffix(".git") or "suite"
