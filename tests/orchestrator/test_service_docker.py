"""The orchestrator service on the docker backend: a batch naming a task whose Dockerfile the
local backend refuses runs in the task's image, each transition streamed and the reward stored."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from clawgym.orchestrator.interface import Batch, RolloutRequest
from tests.orchestrator.test_service import by_rollout, statuses_of
from tests.sandbox.docker_standin import ensure_standin

pytestmark = pytest.mark.docker

TASK = Path(__file__).parents[1] / "tasks" / "data" / "terminal-bench" / "build-sum-tool"


def test_a_batch_runs_in_the_tasks_own_image_and_records_oracle_one_and_nop_below(
    make_orchestrator, tmp_path
):
    standin = ensure_standin()
    suite = tmp_path / "suite"
    shutil.copytree(TASK, suite / TASK.name)
    owner = f"orch-docker-{uuid.uuid4().hex[:8]}"
    docker = {"image": standin, "relay_image": standin, "state_dir": str(tmp_path / "state")}
    served = make_orchestrator(sandbox={"backend": "docker", "owner": owner, "docker": docker})
    assert served.orchestrator.backend.name == "docker"
    run = served.store.create_run("orchestrator-docker-test")
    batch = Batch(run.id, [RolloutRequest(TASK.name, h) for h in ("oracle", "nop")], suite=str(suite))
    statuses = served.call(statuses_of(served.orchestrator, batch))
    rewards = {}
    for seq in by_rollout(statuses).values():
        assert [s.state for s in seq] == ["registered", "running", "verifying", "finished"], (
            f"{seq[-1].harness}: {[s.state for s in seq]} {seq[-1].error}"
        )
        record = served.store.get_rollout(seq[-1].rollout_id)
        assert record.sandbox.startswith("clawgym-sbx-"), "the store names the container"
        rewards[seq[-1].harness] = record.reward
    assert rewards == {"oracle": 1.0, "nop": 0.5}, f"the verifier ran in the task's image: {rewards}"
    left = subprocess.run(
        ["docker", "ps", "--all", "--filter", f"label=clawgym.dev/owner={owner}", "--format", "{{.Names}}"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert left == [], f"every rollout's container is gone: {left}"
