"""Loader for the ClawGym task format (the bundled mini suite uses it too).

    TASK/
      data_entry.json   {"user_query": "...", "input_mount_dir": "/root/.openclaw/workspace",
                         "id": "...", "split": "train"|"validation"|"test", "timeout_s": 900, ...}
      input_files/      copied into the workspace before the harness starts (optional)
      reward/           copied to /tests after the harness exits; either
        reward.sh         `bash reward.sh WORKDIR` (cwd WORKDIR) prints the reward as its last line
        check.py          `python3 check.py WORKDIR` prints a JSON dict of sub-scores
      solution/solve.sh the reference solution, run in WORKDIR (optional; used by the oracle)

A hybrid task (ClawGym-Bench: 0.7 x code checks + 0.3 x rubric) also carries its rubric in
data_entry.json (`tasks.rubric`): `"rules": [...]` as benchmark rows have it, the whole
`"llm_rubric": {...}` object, or `metadata.rule` as ClawGym-Agents' dataset builder writes it;
`"rubric_weight"` (default 0.3) overrides the rubric's share. `metadata.grading_type: "hybrid"`
without a rubric is an error.

Fields of data_entry.json other than those above are kept as metadata.
"""

from __future__ import annotations

import json
import posixpath
from pathlib import Path

from clawgym.tasks.model import (
    DEFAULT_WORKDIR,
    SOLUTION_DIR,
    TESTS_DIR,
    Task,
    TaskFile,
    TaskFormatError,
    VerifierSpec,
)
from clawgym.tasks.rubric import RUBRIC_WEIGHT, Rubric, parse_rubric

FORMAT = "clawgym"
_KNOWN = {"id", "task_id", "user_query", "input_mount_dir", "split", "timeout_s", "threshold", "rules",
          "llm_rubric", "rubric_weight"}  # fmt: skip


def is_clawgym_task(path: Path) -> bool:
    return (path / "data_entry.json").is_file()


def load_clawgym_task(path: Path) -> Task:
    """Reads one ClawGym task directory; TaskFormatError names the file and the problem."""
    path = Path(path)
    entry_file = path / "data_entry.json"
    try:
        entry = json.loads(entry_file.read_text())
    except FileNotFoundError as e:
        raise TaskFormatError(f"{path}: no data_entry.json") from e
    except json.JSONDecodeError as e:
        raise TaskFormatError(f"{entry_file}: not JSON ({e})") from e
    if not isinstance(entry, dict):
        raise TaskFormatError(f"{entry_file}: must hold a JSON object")
    query = entry.get("user_query")
    if not isinstance(query, str) or not query.strip():
        raise TaskFormatError(f"{entry_file}: user_query must be a non-empty string")
    workdir = entry.get("input_mount_dir") or DEFAULT_WORKDIR
    if not isinstance(workdir, str) or not workdir.startswith("/"):
        raise TaskFormatError(f"{entry_file}: input_mount_dir must be an absolute path, got {workdir!r}")
    split = entry.get("split", "")
    if split not in ("train", "validation", "test", ""):
        raise TaskFormatError(f"{entry_file}: split must be train, validation or test, got {split!r}")

    reward_dir = path / "reward"
    if (reward_dir / "reward.sh").is_file():
        verifier = VerifierSpec(
            "reward_sh", (TaskFile(reward_dir, TESTS_DIR),), script=f"{TESTS_DIR}/reward.sh"
        )
    elif (reward_dir / "check.py").is_file():
        verifier = VerifierSpec(
            "check_py", (TaskFile(reward_dir, TESTS_DIR),), script=f"{TESTS_DIR}/check.py"
        )
    else:
        raise TaskFormatError(f"{path}: needs reward/reward.sh or reward/check.py")
    if "threshold" in entry:
        verifier = _with_threshold(verifier, entry["threshold"], entry_file)

    rubric = _rubric(entry, entry_file)

    inputs = path / "input_files"
    solution = path / "solution"
    has_solution = (solution / "solve.sh").is_file()
    return Task(
        id=str(entry.get("id") or entry.get("task_id") or path.name),
        instruction=query,
        format=FORMAT,
        source_dir=path,
        verifier=verifier,
        workdir=posixpath.normpath(workdir),
        files=(TaskFile(inputs, posixpath.normpath(workdir)),) if inputs.is_dir() else (),
        solution=(TaskFile(solution, SOLUTION_DIR),) if has_solution else (),
        solution_script=f"{SOLUTION_DIR}/solve.sh" if has_solution else "",
        split=split,
        agent_timeout_s=float(entry.get("timeout_s", 900.0)),
        metadata={k: v for k, v in entry.items() if k not in _KNOWN},
        rubric=rubric,
    )


def _rubric(entry: dict, where: Path) -> Rubric | None:
    metadata = entry.get("metadata") if isinstance(entry.get("metadata"), dict) else {}
    sources = [entry.get("llm_rubric"), entry.get("rules"), metadata.get("rule"), metadata.get("rules")]
    given = [s for s in sources if s not in (None, [])]
    if len(given) > 1:
        raise TaskFormatError(f"{where}: give the rubric once (llm_rubric, rules or metadata.rule)")
    rubric = parse_rubric(
        given[0] if given else None, where, rubric_weight=entry.get("rubric_weight", RUBRIC_WEIGHT)
    )
    if rubric is None and metadata.get("grading_type") == "hybrid":
        raise TaskFormatError(f"{where}: grading_type is hybrid but the task has no rubric rules")
    return rubric


def _with_threshold(verifier: VerifierSpec, value: object, where: Path) -> VerifierSpec:
    if not isinstance(value, int | float) or not 0.0 <= float(value) <= 1.0:
        raise TaskFormatError(f"{where}: threshold must be a number in [0, 1], got {value!r}")
    return VerifierSpec(verifier.kind, verifier.files, script=verifier.script, threshold=float(value))
