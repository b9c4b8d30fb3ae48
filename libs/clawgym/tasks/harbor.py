"""Loader for Harbor / Terminal-Bench 2 task folders.

    TASK/
      instruction.md        the instruction
      task.toml             [verifier] timeout_sec, [agent] timeout_sec, [environment] docker_image, ...
      environment/          Dockerfile (+ docker-compose.yaml): read by `dockerfile.plan_dockerfile`;
                            the build context of the task's image (`Task.image`)
      solution/solve.sh     the reference solution (optional), run in the workdir
      tests/test.sh         copied to /tests after the harness exits; writes the reward to
                            /logs/verifier/reward.txt

Most test.sh scripts first fetch uv and pytest from the internet, which a sandbox cannot reach.
When test.sh does that and tests/ holds test_*.py files, the files are run with the sandbox's
own pytest instead (reward = passed/total, as test.sh would compute it); otherwise test.sh runs.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from clawgym.tasks.model import (
    LOGS_DIR,
    SOLUTION_DIR,
    TESTS_DIR,
    Task,
    TaskFile,
    TaskFormatError,
    VerifierSpec,
)
from clawgym.tasks.terminal_bench import environment_plan, pytest_verifier, task_image

FORMAT = "harbor"
REWARD_FILE = f"{LOGS_DIR}/verifier/reward.txt"
# A test.sh line that needs the internet: fetching a tool or installing packages.
_FETCHES = re.compile(r"\b(curl|wget)\b|\buvx?\b|\bpip3? install\b|\bapt(-get)? (update|install)\b")


def is_harbor_task(path: Path) -> bool:
    return (path / "task.toml").is_file() or (path / "instruction.md").is_file()


def load_harbor_task(path: Path) -> Task:
    """Reads one Harbor task folder; TaskFormatError names the file and the problem."""
    path = Path(path)
    try:
        instruction = (path / "instruction.md").read_text()
    except FileNotFoundError as e:
        raise TaskFormatError(f"{path}: no instruction.md") from e
    config: dict = {}
    if (path / "task.toml").is_file():
        try:
            config = tomllib.loads((path / "task.toml").read_text())
        except tomllib.TOMLDecodeError as e:
            raise TaskFormatError(f"{path / 'task.toml'}: not TOML ({e})") from e
    environment = config.get("environment", {})
    env_dir = path / "environment"
    plan = environment_plan(env_dir, image=environment.get("docker_image") or "")

    tests = path / "tests"
    if not (tests / "test.sh").is_file():
        raise TaskFormatError(f"{path}: no tests/test.sh")
    timeout = float(config.get("verifier", {}).get("timeout_sec", 600.0))
    verifier = pytest_verifier(tests, timeout)
    if not verifier.test_files or not _FETCHES.search((tests / "test.sh").read_text()):
        verifier = VerifierSpec(
            "reward_file",
            (TaskFile(tests, TESTS_DIR),),
            script=f"{TESTS_DIR}/test.sh",
            reward_file=REWARD_FILE,
            env={"TEST_DIR": TESTS_DIR},
            timeout_s=timeout,
        )
    has_solution = (path / "solution" / "solve.sh").is_file()
    return Task(
        id=path.name,
        instruction=instruction.strip(),
        format=FORMAT,
        source_dir=path,
        verifier=verifier,
        **plan.task_fields(),
        solution=(TaskFile(path / "solution", SOLUTION_DIR),) if has_solution else (),
        solution_script=f"{SOLUTION_DIR}/solve.sh" if has_solution else "",
        agent_timeout_s=float(config.get("agent", {}).get("timeout_sec", 900.0)),
        metadata=dict(config.get("metadata", {})),
        image=task_image(env_dir, environment.get("docker_image") or ""),
    )
