"""ClawGym's task rows (JSONL: ClawGym-Bench's `benchmark_data.jsonl`, ClawGym-Task's
`syn_task.jsonl`) → ClawGym task folders (`clawgym_format`), as ClawGym-Agents' dataset builder does.

One row::

    {"prompt": "...", "hook_code": "python3 reward/test.py /root/.openclaw/workspace",
     "input_files": [{"file_path": "input/data.csv", "content": "..."},
                     {"file_path": "reward/test.py", "content": "..."}],   # the code checker
     "rules": [...] | null,                                                # the rubric (hybrid tasks)
     "category": "...", "macro_category": "...", "action": [...]}

becomes `data_entry.json` (`user_query` = prompt, the rubric's `rules`, `metadata.grading_type`
hybrid or automated), `input_files/` (everything not under reward/), `reward/check.py`
(reward/test.py, which prints a JSON dict of sub-scores for the workspace given as its argument)
and `reward/reward.sh`, ClawGym's own wrapper: the reward is the plain mean of the sub-scores (a
bare number passes through). `hook_code` is not run: it always names that checker. The checker is
never in the workspace while the agent works: it is copied in only after the harness exits.

A row that is not a task (not JSON, a missing field, a lone surrogate UTF-8 cannot write, a name
that is both a file and a folder) is a `BadRow` naming its line; `convert_rows` converts the
others, `convert_jsonl` refuses the whole file.
"""

from __future__ import annotations

import json
import posixpath
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clawgym.tasks.model import TaskFormatError

WORKSPACE = "/root/.openclaw/workspace"  # where ClawGym's tasks are worked on (hook_code's argument)
_NAME = re.compile(r"[^A-Za-z0-9._-]+")
# ClawGym-Agents' reward.sh (data/build_dataset_from_hf.py): the checker's sub-scores, averaged
REWARD_SH = """#!/usr/bin/env bash
set -euo pipefail
python3 "$(dirname "$0")/check.py" "${1:-.}" | python3 -c '
import json, sys
data = json.loads(sys.stdin.read().strip().splitlines()[-1])
print(sum(float(v) for v in data.values()) / len(data) if isinstance(data, dict) and data
      else float(data) if isinstance(data, (int, float)) else 0.0)'
"""


def _task_id(row: dict[str, Any], index: int) -> str:
    for key in ("task_id", "id"):
        if isinstance(row.get(key), str) and row[key].strip():
            return _NAME.sub("-", row[key].strip()).strip(".-") or f"task_{index:04d}"
    template = row.get("origin_template")
    if isinstance(template, str):  # ClawGym-Task: the id is in the template's front matter
        for line in template.splitlines():
            if line.strip().startswith("id:"):
                return _NAME.sub("-", line.split(":", 1)[1].strip()).strip(".-") or f"task_{index:04d}"
    return f"task_{index:04d}"


def _relative(path: Any, where: str) -> str:
    if not isinstance(path, str) or not path.strip():
        raise TaskFormatError(f"{where}: file_path must be a non-empty string")
    norm = posixpath.normpath(path.strip())
    if norm.startswith(("/", "..")) or norm == ".":
        raise TaskFormatError(f"{where}: file_path {path!r} must stay inside the task")
    return norm


# what write_task writes besides the row's own files (a row's file may not be one of their folders)
_GENERATED = ("data_entry.json", "reward/check.py", "reward/reward.sh")


@dataclass(frozen=True)
class BadRow:
    """A row that is not a task: its line (from 1) and why, the error naming the file and line."""

    line: int
    error: str


def _target(path: str) -> str:
    """Where a row's file goes in the task folder: the checker and reward/ files under reward/, the rest
    under input_files/."""
    if path in ("reward/test.py", "reward/check.py"):
        return "reward/check.py"
    return path if path.startswith("reward/") else f"input_files/{path}"


def _check_encodable(row: dict[str, Any], where: str) -> None:
    """JSON's \\u escapes can spell half a surrogate pair, which no UTF-8 file or name can hold."""
    try:
        json.dumps(row, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as e:
        bad = e.object[e.start : e.end]
        raise TaskFormatError(f"{where}: holds a lone surrogate {bad!r}, which UTF-8 cannot encode") from e


def _check_clashes(targets: list[str], where: str) -> None:
    """A name used as a file and as a folder (`a` and `a/b`) cannot both be written."""
    files = {*targets, *_GENERATED}
    for path in targets:
        parents = posixpath.dirname(path)
        while parents:
            if parents in files:
                raise TaskFormatError(f"{where}: {parents!r} is both a file and the folder of {path!r}")
            parents = posixpath.dirname(parents)


def write_task(row: dict[str, Any], index: int, dest: Path, where: str) -> Path:
    """One row as a task folder under `dest`; TaskFormatError names the row and the problem.
    The row is checked whole before anything is written, and a folder left half written is removed."""
    _check_encodable(row, where)
    prompt = row.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise TaskFormatError(f"{where}: prompt must be a non-empty string")
    files = row.get("input_files") or []
    if not isinstance(files, list):
        raise TaskFormatError(f"{where}: input_files must be a list")
    contents: dict[str, str] = {}  # target → content
    for i, item in enumerate(files):
        if not isinstance(item, dict) or not isinstance(item.get("content"), str):
            raise TaskFormatError(f"{where}: input_files[{i}] needs a file_path and a string content")
        contents[_target(_relative(item.get("file_path"), f"{where}: input_files[{i}]"))] = item["content"]
    if "reward/check.py" not in contents:
        raise TaskFormatError(f"{where}: no reward/test.py code checker in input_files")
    _check_clashes(list(contents), where)
    folder = dest / _task_id(row, index)
    if folder.exists():
        raise TaskFormatError(f"{where}: task id {folder.name!r} is used twice")
    try:
        _write_folder(folder, row, prompt, contents)
    except OSError as e:  # a name too long for the file system, a full disk
        shutil.rmtree(folder, ignore_errors=True)
        raise TaskFormatError(f"{where}: cannot write task {folder.name!r} ({type(e).__name__}: {e})") from e
    return folder


def _write_folder(folder: Path, row: dict[str, Any], prompt: str, contents: dict[str, str]) -> None:
    for target, content in contents.items():
        (folder / target).parent.mkdir(parents=True, exist_ok=True)
        (folder / target).write_text(content)
    (folder / "reward" / "reward.sh").write_text(REWARD_SH)
    rules = row.get("rules", row.get("rule"))
    metadata = {k: row[k] for k in ("category", "macro_category", "action") if k in row}
    metadata["grading_type"] = "hybrid" if rules else "automated"
    entry: dict[str, Any] = {
        "task_id": folder.name,
        "user_query": prompt,
        "input_mount_dir": WORKSPACE,
        "metadata": metadata,
    }
    if rules:
        entry["rules"] = rules
    (folder / "data_entry.json").write_text(json.dumps(entry, indent=2, ensure_ascii=False) + "\n")


def convert_rows(src: Path, dest: Path) -> tuple[list[Path], list[BadRow]]:
    """Every row of `src` that is a task, as a task folder under `dest` (created), in order; and the
    rows that are not. A row's default id counts every row before it, bad ones too, so fixing one
    row renames no other task. TaskFormatError only when `src` has no rows at all."""
    dest.mkdir(parents=True, exist_ok=True)
    folders: list[Path] = []
    bad: list[BadRow] = []
    index = 0
    # bytes.splitlines splits at \n and \r only: a row's raw U+2028 (valid in JSON strings) stays in it
    for number, raw in enumerate(Path(src).read_bytes().splitlines(), 1):
        if not raw.strip():
            continue
        where = f"{src}:{number}"
        try:
            folders.append(write_task(_parse_row(raw, where), index, dest, where))
        except TaskFormatError as e:
            bad.append(BadRow(number, str(e)))
        index += 1
    if not index:
        raise TaskFormatError(f"{src}: no task rows")
    return folders, bad


def convert_jsonl(src: Path, dest: Path) -> list[Path]:
    """Every row of `src` as a task folder under `dest` (created); TaskFormatError on the first bad row."""
    folders, bad = convert_rows(src, dest)
    if bad:
        raise TaskFormatError(bad[0].error)
    return folders


def _parse_row(raw: bytes, where: str) -> dict[str, Any]:
    try:
        row = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise TaskFormatError(f"{where}: not UTF-8 ({e})") from e
    except json.JSONDecodeError as e:
        raise TaskFormatError(f"{where}: not JSON ({e})") from e
    except RecursionError as e:
        raise TaskFormatError(f"{where}: nested too deeply to read") from e
    if not isinstance(row, dict):
        raise TaskFormatError(f"{where}: a row must be a JSON object")
    return row
