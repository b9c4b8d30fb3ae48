"""Runs a task in a sandbox's terms: put its files in, put the oracle's solution in, compute its reward.

Works on anything with the `clawgym.sandbox.interface.Sandbox` methods it uses, so the
orchestrator, `clawgym tasks check` and tests call the same code on any backend. A verifier that
crashes, times out or prints no number gives reward 0 with the reason in `Verdict.detail`: that is
a task failure, never an infrastructure one.

The verifier runs after the harness in a context the harness could not prepare:

- /tests, HOME and /tmp (and Harbor's /logs) are emptied from outside (`Sandbox.reset_dir`, which
  also kills anything still running), the verifier's files put in, and /tests sealed read-only.
- The verifier's PATH and PYTHONPATH keep no entry inside a sandbox-writable directory (nor an
  empty one, the cwd), and its own Pythons run isolated (`-I`: no cwd, user site or PYTHON*
  variables), so what the harness left in the workspace is data, never code the verifier runs.
- Then what /tests holds is compared with what was put there, and a reward file must not exist
  yet. A difference can only be the harness's doing on a backend whose reset it could defeat: the
  attempt fails closed with reward 0, a task failure (retrying would hand the same trick another
  go). A reset or seal that cannot run at all raises: an infrastructure failure.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import posixpath
import re
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from clawgym.errors import NotFound
from clawgym.sandbox.interface import ExecResult, Sandbox, SandboxSpec, storage_layout
from clawgym.tasks.model import LOGS_DIR, TESTS_DIR, Task, TaskFile

# The verifier's own Pythons: isolated (-I), then `_BOOT` adds back only what was chosen for them,
# the PYTHONPATH of `verifier_env` and, for a script, the script's own sealed folder.
# Run as `PYTHON -m module args...` or `PYTHON script args...`.
_BOOT = """import os, runpy, sys
sys.path[:0] = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
if sys.argv[1] == "-m":
    sys.argv = sys.argv[2:]
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
else:
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))
    runpy.run_path(sys.argv[0], run_name="__main__")
"""
PYTHON: tuple[str, ...] = ("python3", "-I", "-B", "-c", _BOOT)  # -B, as -I ignores PYTHON* variables
# The sandbox's pytest for Terminal-Bench style tests: the system python3 with pytest on PYTHONPATH
# (`provision.Provisioner` installs it on the host, cached; a pod's image must ship pytest).
DEFAULT_PYTEST: tuple[str, ...] = (*PYTHON, "-m", "pytest")
REWARD_TAIL_BYTES = 64 << 10
_SUMMARY = re.compile(r"^(PASSED|FAILED|ERROR|XPASS|XFAIL)\b")


@dataclass(frozen=True)
class Verdict:
    """A verifier's outcome: the reward in [0, 1], whether it passes the task's threshold, and why."""

    reward: float
    passed: bool
    detail: str = ""
    scores: Mapping[str, float] = field(default_factory=dict)
    failed_closed: bool = False  # the harness tampered with the verifier's context: no part is scored


# --- putting files in ---------------------------------------------------------------------------


async def put_files(sandbox: Sandbox, files: Sequence[TaskFile]) -> None:
    """Copies host files and directories to their sandbox paths (a file keeps its exec bit)."""
    for item in files:
        if item.source.is_dir():
            await sandbox.put_dir(item.source, item.target)
        else:
            await sandbox.put_file(
                item.target, item.source.read_bytes(), mode=item.source.stat().st_mode & 0o777
            )


async def prepare_workspace(task: Task, sandbox: Sandbox) -> None:
    """Puts the task's own files in before the harness starts (never the tests or the solution)."""
    await put_files(sandbox, task.files)


# --- rewards ------------------------------------------------------------------------------------


def combine_scores(scores: Mapping[str, object]) -> float:
    """One reward from a dict of sub-scores: its `reward`, `score` or `total`, else the numeric mean."""
    for key in ("reward", "score", "total"):
        if isinstance(scores.get(key), int | float):
            return float(scores[key])  # type: ignore[arg-type]
    values = [float(v) for v in scores.values() if isinstance(v, int | float)]
    return sum(values) / len(values) if values else 0.0


def parse_reward(text: str) -> float | None:
    """The reward a script printed: its last non-empty line as a float, or a JSON dict of scores."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    try:
        value = float(lines[-1])
    except ValueError:
        try:
            scores = json.loads(lines[-1])
        except json.JSONDecodeError:
            return None
        if not isinstance(scores, dict):
            return None
        value = combine_scores(scores)
    return None if math.isnan(value) else min(1.0, max(0.0, value))


def pytest_reward(output: str, exit_code: int) -> tuple[float, int, int]:
    """(reward, passed, total) from `pytest -rA` output: passed/total; exit code 0 is needed for 1.0."""
    outcomes = [m.group(1) for line in output.splitlines() if (m := _SUMMARY.match(line))]
    passed = sum(o in ("PASSED", "XFAIL") for o in outcomes)
    total = len(outcomes)
    if total == 0:
        return 0.0, 0, 0
    reward = passed / total
    if exit_code != 0 and reward >= 1.0:
        reward = 0.0  # every listed test passed yet pytest failed: a collection or session error
    return reward, passed, total


def _tail(result: ExecResult, limit: int = 2000) -> str:
    text = (result.stdout + b"\n" + result.stderr).decode("utf-8", "replace").strip()
    return text[-limit:]


def scratch_dirs(task: Task, spec: SandboxSpec) -> list[str]:
    """The writable directories the verifier gets empty: its own (/tests, Harbor's /logs) and the
    harness's HOME and /tmp, unless the task keeps its own files there."""
    own = [TESTS_DIR, *([LOGS_DIR] if task.verifier.kind == "reward_file" else [])]
    task_paths = {task.workdir, *task.mounts}
    return own + [path for path in (spec.home, "/tmp") if path not in task_paths]


def _trusted_path(value: str, writable: Sequence[str]) -> str:
    """`value` (a PATH-like list) without empty, relative or sandbox-writable entries."""

    def inside(entry: str, top: str) -> bool:
        return entry == top or entry.startswith(top.rstrip("/") + "/")

    kept = []
    for entry in value.split(os.pathsep):
        norm = posixpath.normpath(entry) if entry.startswith("/") else ""
        if norm and not any(inside(norm, top) for top in writable):
            kept.append(entry)
    return os.pathsep.join(kept)


def verifier_env(task: Task, spec: SandboxSpec, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The verifier's environment: the task's, the orchestrator's `env` and the verifier's own. The
    task's PATH and PYTHONPATH (its image's ENV) lose every folder the sandbox can write, sealed
    /tests aside; the orchestrator's (provisioned packages, read-only even where they sit under
    HOME) are its own choice and stay as given."""
    writable = [path for _, path in storage_layout(spec) if path != TESTS_DIR]

    def trusted(values: Mapping[str, str]) -> dict[str, str]:
        out = dict(values)
        for key in ("PATH", "PYTHONPATH"):
            if key in out:
                out[key] = _trusted_path(out[key], writable)
                if not out[key]:
                    del out[key]  # the orchestrator's or the backend's default (the system's) applies
        return out

    return {
        **trusted(task.env),
        **(env or {}),
        **trusted(task.verifier.env),
        "WORKSPACE": task.workdir,
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",  # for the Pythons a shell verifier starts itself
    }


async def prepare_verifier(task: Task, sandbox: Sandbox) -> str | None:
    """Empties the scratch directories, puts the verifier's files in and seals /tests; returns what
    the sandbox still holds that it should not (the attempt then fails closed), else None."""
    for path in scratch_dirs(task, sandbox.spec):
        await sandbox.reset_dir(path)
    await put_files(sandbox, task.verifier.files)
    await sandbox.seal_dir(TESTS_DIR)
    found = _tree_of_tar(await sandbox.get_tar(TESTS_DIR))
    expected = _tree_of_files(task.verifier.files)
    if found != expected:
        odd = sorted(name for name in found.keys() | expected.keys() if found.get(name) != expected.get(name))
        return f"{TESTS_DIR} does not hold what the orchestrator put there: {', '.join(odd[:5])}"
    if task.verifier.kind == "reward_file":
        try:
            await sandbox.read_ends(task.verifier.reward_file, 0, 0)  # whether it is there, not its bytes
        except NotFound:
            pass
        else:
            return f"{task.verifier.reward_file} exists before the verifier ran"
    return None


async def verify(
    task: Task,
    sandbox: Sandbox,
    *,
    pytest: Sequence[str] = DEFAULT_PYTEST,
    env: Mapping[str, str] | None = None,
) -> Verdict:
    """Prepares the verifier's clean context (only now, after the harness exited), runs the verifier
    in it and returns the verdict.

    `env`: extra environment, e.g. the provisioned PYTHONPATH that holds pytest.
    """
    spec = task.verifier
    problem = await prepare_verifier(task, sandbox)
    if problem is not None:
        return Verdict(0.0, False, f"{problem}; the attempt fails closed", failed_closed=True)
    run = {"env": verifier_env(task, sandbox.spec, env), "cwd": task.workdir, "timeout_s": spec.timeout_s}

    if spec.kind == "pytest":
        result = await sandbox.exec([*pytest, *spec.test_files, "-rA", "-p", "no:cacheprovider"], **run)
        reward, passed, total = pytest_reward(result.stdout.decode("utf-8", "replace"), result.exit_code)
        detail = f"{passed}/{total} tests passed" + (" (timed out)" if result.timed_out else "")
        return Verdict(
            reward,
            spec.passed(reward),
            f"{detail}\n{_tail(result)}",
            {"tests_passed": passed, "tests": total},
        )

    if spec.kind == "reward_sh":
        result = await sandbox.exec(["bash", spec.script, task.workdir], **run)
        text = result.stdout.decode("utf-8", "replace")
    elif spec.kind == "check_py":
        result = await sandbox.exec([*PYTHON, spec.script, task.workdir], **run)
        text = result.stdout.decode("utf-8", "replace")
    else:  # reward_file
        result = await sandbox.exec(["bash", spec.script], **run)
        try:
            # the reward is its last line: a file of any size costs at most REWARD_TAIL_BYTES here
            ends = await sandbox.read_ends(spec.reward_file, 0, REWARD_TAIL_BYTES)
            text = (ends.head + ends.tail).decode("utf-8", "replace")
        except NotFound:
            return Verdict(0.0, False, f"the verifier wrote no {spec.reward_file}\n{_tail(result)}")

    if result.timed_out:
        return Verdict(0.0, False, f"the verifier timed out after {spec.timeout_s}s\n{_tail(result)}")
    reward = parse_reward(text)
    if reward is None:
        return Verdict(
            0.0, False, f"the verifier printed no reward (exit {result.exit_code})\n{_tail(result)}"
        )
    scores = _scores(text) if spec.kind == "check_py" else {}
    return Verdict(reward, spec.passed(reward), _tail(result), scores)


def _scores(text: str) -> dict[str, float]:
    lines = [line for line in text.splitlines() if line.strip()]
    try:
        scores = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        return {}
    return (
        {k: float(v) for k, v in scores.items() if isinstance(v, int | float)}
        if isinstance(scores, dict)
        else {}
    )


# --- what /tests should hold ---------------------------------------------------------------------


def _tree_of_files(files: Sequence[TaskFile]) -> dict[str, str]:
    """{name relative to /tests' parent: kind and digest} of the host files put under /tests."""
    top = posixpath.dirname(TESTS_DIR)
    tree: dict[str, str] = {posixpath.relpath(TESTS_DIR, top): "dir"}
    for item in files:
        if not (item.target == TESTS_DIR or item.target.startswith(f"{TESTS_DIR}/")):
            continue
        base = posixpath.relpath(item.target, top)
        paths = [item.source, *sorted(item.source.rglob("*"))] if item.source.is_dir() else [item.source]
        for path in paths:
            rel = path.relative_to(item.source).as_posix() if path != item.source else ""
            name = posixpath.join(base, rel) if rel else base
            tree[name] = _kind(path)
            for parent in Path(name).parents:  # the folders a file target creates
                if str(parent) != ".":
                    tree.setdefault(str(parent), "dir")
    return tree


def _kind(path: Path) -> str:
    if path.is_symlink():
        return f"link {os.readlink(path)}"
    if path.is_dir():
        return "dir"
    return f"file {hashlib.sha256(path.read_bytes()).hexdigest()}"


def _tree_of_tar(data: bytes) -> dict[str, str]:
    """The same map from a sandbox's tar of /tests (GNU tar names folders with a trailing slash)."""
    tree: dict[str, str] = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tf:
        for member in tf.getmembers():
            name = member.name.rstrip("/")
            if member.isdir():
                tree[name] = "dir"
            elif member.issym():
                tree[name] = f"link {member.linkname}"
            elif member.isfile():
                content = tf.extractfile(member)
                tree[name] = f"file {hashlib.sha256(content.read() if content else b'').hexdigest()}"
            else:
                tree[name] = f"special {member.type!r}"
    return tree
