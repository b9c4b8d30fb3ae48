"""tests/engines.py: a test whose engine is missing skips on a developer's machine and fails under CI.

A tiny test module using the helper runs in a real pytest subprocess whose PATH holds no `docker`,
so the real probe finds no engine."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NEEDS_DOCKER = """
from tests.engines import docker_answers, require_engine


def test_needs_docker():
    if not docker_answers():
        require_engine("no Docker engine answers (the test's PATH has no docker)")
"""


def run_without_docker(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess:
    (tmp_path / "test_needs_docker.py").write_text(NEEDS_DOCKER)
    (tmp_path / "bin").mkdir(exist_ok=True)
    env = {key: value for key, value in os.environ.items() if key != "CI"}
    env.update(PATH=str(tmp_path / "bin"), PYTHONPATH=str(REPO))
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_a_missing_engine_fails_the_test_under_ci(tmp_path):
    done = run_without_docker(tmp_path, "true")
    assert done.returncode == 1 and "1 failed" in done.stdout, (
        f"under CI=true a missing engine must fail the run, not skip it:\n{done.stdout}\n{done.stderr}"
    )
    assert "no Docker engine answers (the test's PATH has no docker) (CI=true" in done.stdout, (
        f"the failure gives the skip's reason: {done.stdout}"
    )


@pytest.mark.parametrize("ci", [None, "false"], ids=["unset", "false"])
def test_a_missing_engine_skips_the_test_outside_ci(tmp_path, ci):
    done = run_without_docker(tmp_path, ci)
    assert done.returncode == 0 and "1 skipped" in done.stdout, f"{done.stdout}\n{done.stderr}"
    assert "no Docker engine answers (the test's PATH has no docker)" in done.stdout, (
        f"the skip says what is missing: {done.stdout}"
    )
