"""The engines deployment tests need (Docker, Kubernetes, Chromium): skipped without one, failed under CI.

On a developer's machine a test whose engine is missing skips, saying what is missing. Under CI
(env CI=true, as .ci/run sets) the same test fails with the same reason: .ci/run starts every
engine, so one that does not answer is a broken CI machine, and a run that skipped the compose,
Docker-backend and browser tests must not pass.

- `in_ci()` — whether this run is CI's.
- `require_engine(reason)` — skips the test, or fails it under CI; call it where the engine is found missing.
- `PROBE_TIMEOUT_S` — how long a probe waits for an engine to answer: generous under CI, where a
  loaded machine answers slowly and a short timeout would report a live engine as missing.
- `docker_answers()` — whether a Docker engine answers `docker info` within that time.
"""

import os
import subprocess
from typing import NoReturn

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


PROBE_TIMEOUT_S = 180.0 if in_ci() else 30.0


def require_engine(reason: str) -> NoReturn:
    """Skips the calling test (or fixture) because `reason`; under CI, fails it with that reason."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: a missing engine fails the run, it does not skip)", pytrace=False)
    pytest.skip(reason)


def docker_answers() -> bool:
    try:
        done = subprocess.run(["docker", "info"], capture_output=True, timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0
