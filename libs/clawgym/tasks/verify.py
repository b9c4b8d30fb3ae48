"""Runs a task in a sandbox's terms: put its files in, put the oracle's solution in, compute its reward.

Works on anything with the `clawgym.sandbox.interface.Sandbox` methods it uses (`put_file`,
`put_dir`, `exec`, `get_file`), so the orchestrator, `clawgym tasks check` and tests call the same
code on any backend. The verifier's files go in only here, after the harness has exited. A verifier
that crashes, times out or prints no number gives reward 0 with the reason in `Verdict.detail`:
that is a task failure, never an infrastructure one.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from clawgym.errors import NotFound
from clawgym.sandbox.interface import ExecResult, Sandbox
from clawgym.tasks.model import TESTS_DIR, Task, TaskFile

# The sandbox's pytest for Terminal-Bench style tests: the system python3 with pytest on PYTHONPATH
# (`provision.Provisioner` installs it on the host, cached; a pod's image must ship pytest).
DEFAULT_PYTEST: tuple[str, ...] = ("python3", "-m", "pytest")
_SUMMARY = re.compile(r"^(PASSED|FAILED|ERROR|XPASS|XFAIL)\b")


@dataclass(frozen=True)
class Verdict:
    """A verifier's outcome: the reward in [0, 1], whether it passes the task's threshold, and why."""

    reward: float
    passed: bool
    detail: str = ""
    scores: Mapping[str, float] = field(default_factory=dict)


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


async def verify(
    task: Task,
    sandbox: Sandbox,
    *,
    pytest: Sequence[str] = DEFAULT_PYTEST,
    env: Mapping[str, str] | None = None,
) -> Verdict:
    """Copies the verifier in (only now, after the harness exited), runs it and returns the verdict.

    `env`: extra environment, e.g. the provisioned PYTHONPATH that holds pytest.
    """
    spec = task.verifier
    await sandbox.exec(
        ["sh", "-c", f"rm -rf {TESTS_DIR}/* {TESTS_DIR}/.[!.]* 2>/dev/null; true"], timeout_s=60
    )
    await put_files(sandbox, spec.files)
    full_env = {
        **task.env,
        **(env or {}),
        **spec.env,
        "WORKSPACE": task.workdir,
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    run = {"env": full_env, "cwd": task.workdir, "timeout_s": spec.timeout_s}

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
        result = await sandbox.exec(["python3", spec.script, task.workdir], **run)
        text = result.stdout.decode("utf-8", "replace")
    else:  # reward_file
        result = await sandbox.exec(["bash", spec.script], **run)
        try:
            text = (await sandbox.get_file(spec.reward_file)).decode("utf-8", "replace")
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
