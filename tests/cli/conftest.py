"""Fixtures of the CLI tests: the real `clawgym` entry point run in a subprocess, a run config in tmp.

- `clawgym(*args)`: runs the installed `clawgym` console script, returns the CompletedProcess.
- `run_config(**sections)`: writes a run.yaml (SQLite store and checkpoints under tmp_path) and returns its path.
- `tensorboard_scalars(logdir)`: what a run's TensorBoard event files hold, read back by TensorBoard.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

CLAWGYM = Path(sys.executable).with_name("clawgym")


@pytest.fixture
def clawgym(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess]:
    def run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(CLAWGYM), *args], capture_output=True, text=True, timeout=timeout, cwd=tmp_path
        )

    return run


@pytest.fixture
def run_config(tmp_path: Path) -> Callable[..., Path]:
    def write(**sections) -> Path:
        data = {
            "store": {"url": f"sqlite:///{tmp_path / 'store.db'}"},
            "trainer": {"model": "tiny-qwen3", "checkpoint_uri": str(tmp_path / "checkpoints")},
        }
        for name, values in sections.items():
            data[name] = {**data.get(name, {}), **values}
        path = tmp_path / "run.yaml"
        path.write_text(yaml.safe_dump(data))
        return path

    return write


def tensorboard_scalars(logdir: Path) -> dict[str, dict[int, float]]:
    """tag -> {step: value} of every scalar in the event files under `logdir`."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0})  # 0: keep every point
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}
