"""Loader for Terminal-Bench 1 task folders.

    TASK/
      task.yaml            instruction, max_agent_timeout_sec, max_test_timeout_sec, difficulty, ...
      Dockerfile           read by `dockerfile.plan_dockerfile` (package installs only, locally);
                           built as the task's image by the docker backend (`Task.image`)
      docker-compose.yaml  more than one service = unsupported, locally and in the image
      solution.sh          the reference solution (optional), run in the workdir
      run-tests.sh         NOT run: it fetches uv and pytest from the internet
      tests/               copied to /tests after the harness exits; its test_*.py files are run
                           with a pytest the sandbox already has; pass = every test passed

The tests see `TEST_DIR=/tests`, as run-tests.sh would.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from clawgym.tasks.dockerfile import DockerPlan, plan_dockerfile
from clawgym.tasks.model import (
    SOLUTION_DIR,
    TESTS_DIR,
    Task,
    TaskFile,
    TaskFormatError,
    TaskImage,
    VerifierSpec,
)

FORMAT = "terminal-bench"


def is_terminal_bench_task(path: Path) -> bool:
    return (path / "task.yaml").is_file()


def load_terminal_bench_task(path: Path) -> Task:
    """Reads one Terminal-Bench 1 task folder; TaskFormatError names the file and the problem."""
    path = Path(path)
    try:
        spec = yaml.safe_load((path / "task.yaml").read_text())
    except FileNotFoundError as e:
        raise TaskFormatError(f"{path}: no task.yaml") from e
    except yaml.YAMLError as e:
        raise TaskFormatError(f"{path / 'task.yaml'}: not YAML ({e})") from e
    if not isinstance(spec, dict) or not isinstance(spec.get("instruction"), str):
        raise TaskFormatError(f"{path / 'task.yaml'}: needs an `instruction` string")

    plan = environment_plan(path)
    tests = path / "tests"
    if not tests.is_dir():
        raise TaskFormatError(f"{path}: no tests/ folder")
    verifier = pytest_verifier(tests, timeout_s=float(spec.get("max_test_timeout_sec", 600.0)))
    if not verifier.test_files:
        raise TaskFormatError(f"{tests}: no test_*.py files")
    has_solution = (path / "solution.sh").is_file()
    return Task(
        id=path.name,
        instruction=spec["instruction"],
        format=FORMAT,
        source_dir=path,
        verifier=verifier,
        **plan.task_fields(),
        solution=(TaskFile(path / "solution.sh", f"{SOLUTION_DIR}/solution.sh"),) if has_solution else (),
        solution_script=f"{SOLUTION_DIR}/solution.sh" if has_solution else "",
        agent_timeout_s=float(spec.get("max_agent_timeout_sec", 900.0)),
        metadata={k: v for k, v in spec.items() if k not in ("instruction",)},
        image=task_image(path),
    )


def pytest_verifier(tests: Path, timeout_s: float) -> VerifierSpec:
    """Runs every tests/test_*.py (and *_test.py) with the sandbox's pytest; reward = passed/total."""
    names = sorted(
        p.name
        for p in tests.iterdir()
        if p.suffix == ".py" and (p.name.startswith("test_") or p.stem.endswith("_test"))
    )
    return VerifierSpec(
        "pytest",
        (TaskFile(tests, TESTS_DIR),),
        test_files=tuple(f"{TESTS_DIR}/{name}" for name in names),
        env={"TEST_DIR": TESTS_DIR},
        timeout_s=timeout_s,
    )


def environment_plan(folder: Path, image: str = "") -> DockerPlan:
    """What the task's environment folder (its Dockerfile and compose file, if any) and the prebuilt
    `image` it names (Harbor's `docker_image`) ask of a sandbox; the first refusal is the reason."""
    plan = plan_dockerfile(folder / "Dockerfile") if (folder / "Dockerfile").is_file() else DockerPlan()
    if image:
        plan.refuse(f"needs its own image {image!r}")
    for name in ("docker-compose.yaml", "docker-compose.yml"):
        if (folder / name).is_file() and (reason := compose_unsupported(folder / name)):
            plan.refuse(reason)
    return plan


def task_image(folder: Path, image: str = "") -> TaskImage | None:
    """The task's own image: the prebuilt `image` if named, else its folder's Dockerfile built with
    the folder as context; None without either. Only compose services stop it."""
    dockerfile = folder / "Dockerfile"
    if not image and not dockerfile.is_file():
        return None
    reasons = [
        reason
        for name in ("docker-compose.yaml", "docker-compose.yml")
        if (folder / name).is_file() and (reason := compose_unsupported(folder / name))
    ]
    unsupported = reasons[0] if reasons else None
    if image:
        return TaskImage(name=image, unsupported=unsupported)
    return TaskImage(dockerfile=dockerfile, context=folder, unsupported=unsupported)


def compose_unsupported(path: Path) -> str | None:
    """Why a docker-compose file stops the local backend: more than the one task container."""
    try:
        compose = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        return f"{path.name} is not YAML ({e})"
    services = compose.get("services") or {} if isinstance(compose, dict) else {}
    if len(services) > 1:
        return f"needs services besides the task container: {', '.join(sorted(services))}"
    return None
