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
"""

from __future__ import annotations

import json
import posixpath
import re
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


def write_task(row: dict[str, Any], index: int, dest: Path, where: str) -> Path:
    """One row as a task folder under `dest`; TaskFormatError names the row and the problem."""
    prompt = row.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise TaskFormatError(f"{where}: prompt must be a non-empty string")
    files = row.get("input_files") or []
    if not isinstance(files, list):
        raise TaskFormatError(f"{where}: input_files must be a list")
    folder = dest / _task_id(row, index)
    if folder.exists():
        raise TaskFormatError(f"{where}: task id {folder.name!r} is used twice")
    checker = None
    for i, item in enumerate(files):
        if not isinstance(item, dict) or not isinstance(item.get("content"), str):
            raise TaskFormatError(f"{where}: input_files[{i}] needs a file_path and a string content")
        path = _relative(item.get("file_path"), f"{where}: input_files[{i}]")
        if path in ("reward/test.py", "reward/check.py"):
            checker = item["content"]
        elif path.startswith("reward/"):
            target = folder / "reward" / path[len("reward/") :]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(item["content"])
        else:
            target = folder / "input_files" / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(item["content"])
    if checker is None:
        raise TaskFormatError(f"{where}: no reward/test.py code checker in input_files")
    (folder / "reward").mkdir(parents=True, exist_ok=True)
    (folder / "reward" / "check.py").write_text(checker)
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
    return folder


def convert_jsonl(src: Path, dest: Path) -> list[Path]:
    """Every row of `src` as a task folder under `dest` (created); returns the folders in order."""
    dest.mkdir(parents=True, exist_ok=True)
    folders = []
    for number, line in enumerate(Path(src).read_text().splitlines(), 1):
        if not line.strip():
            continue
        where = f"{src}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise TaskFormatError(f"{where}: not JSON ({e})") from e
        if not isinstance(row, dict):
            raise TaskFormatError(f"{where}: a row must be a JSON object")
        folders.append(write_task(row, len(folders), dest, where))
    if not folders:
        raise TaskFormatError(f"{src}: no task rows")
    return folders
