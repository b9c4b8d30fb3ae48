"""The orchestrator service on the docker backend: a batch naming a task whose Dockerfile the
local backend refuses runs in the task's image, each transition streamed and the reward stored; an
agent that ends its own container gets reward 0 (its outcome), a container killed from outside is
an infrastructure failure."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from clawgym.orchestrator.interface import Batch, RolloutRequest
from tests.orchestrator.conftest import write_clawgym_task
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
    left = owned_containers(owner)
    assert left == [], f"every rollout's container is gone: {left}"


def owned_containers(owner: str) -> list[str]:
    return subprocess.run(
        ["docker", "ps", "--all", "--filter", f"label=clawgym.dev/owner={owner}", "--format", "{{.Names}}"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip


# --- a sandbox the agent kills is the agent's outcome ---

# From inside, signal PID 1 every way a process can: none reaches it (a namespace's init gets no
# SIGKILL from inside, and the keepalive ignores the rest).
SIGNAL_PID1 = "for s in TERM INT HUP QUIT USR1 USR2 ALRM PIPE KILL; do kill -$s 1; done\nsleep 2\n"
# Make PID 1 the out-of-memory killer's first choice, then fill the memory in small processes: the
# kernel ends PID 1, and the container with it.
OOM_PID1 = (
    "echo 1000 > /proc/1/oom_score_adj\n"
    "for i in $(seq 16); do python3 -c 'import time; b = bytearray(24 << 20)\n"
    "for j in range(0, len(b), 4096): b[j] = 1\n"
    "time.sleep(60)' & done\nwait\n"
)


def run_on_docker(make_orchestrator, tmp_path, solution: str, **orchestrator) -> tuple[list, object]:
    """One oracle rollout of a task whose solution is `solution` (it never writes done.txt, so the
    verifier gives 0) on the docker backend; (its statuses, its store record)."""
    standin = ensure_standin()
    suite = tmp_path / "suite"
    write_clawgym_task(suite, "agent-kills", "Try to end your own sandbox.", solution)
    docker = {"image": standin, "relay_image": standin, "state_dir": str(tmp_path / "state")}
    owner = f"orch-docker-{uuid.uuid4().hex[:8]}"
    served = make_orchestrator(
        sandbox={"backend": "docker", "owner": owner, "docker": docker}, **orchestrator
    )
    run = served.store.create_run("agent-kills")
    batch = Batch(run.id, [RolloutRequest("agent-kills", "oracle")], suite=str(suite))
    statuses = served.call(statuses_of(served.orchestrator, batch))
    return statuses, served.store.get_rollout(statuses[-1].rollout_id)


def test_an_agent_signalling_pid_1_cannot_end_its_container_and_is_scored_zero(make_orchestrator, tmp_path):
    """`kill -TERM 1` used to end the container (its PID 1 trapped TERM to exit): the verifier's
    reset then failed, and the rollout became a retried infrastructure failure, never scored. Now no
    signal from inside ends PID 1: the verifier runs and the agent's reward is 0, recorded at once."""
    statuses, record = run_on_docker(make_orchestrator, tmp_path, SIGNAL_PID1)
    states = [(s.state, s.attempt) for s in statuses]
    assert states == [("registered", 1), ("running", 1), ("verifying", 1), ("finished", 1)], (
        f"one attempt, verified and finished, never a retried failure: {states} {statuses[-1].error}"
    )
    assert (record.status, record.reward, record.passed) == ("finished", 0.0, False), record


def test_an_agent_that_oom_kills_pid_1_gets_reward_zero_not_a_retry(make_orchestrator, tmp_path):
    """An agent can still end its container: raise PID 1's oom_score_adj and fill the memory. The
    container stopped by itself (OOM-killed), not from outside: the attempt is the agent's outcome,
    reward 0 and nothing scored, recorded once; an infrastructure failure would be retried and never
    trained on."""
    statuses, record = run_on_docker(
        make_orchestrator, tmp_path, OOM_PID1, sandbox_resources={"limits": {"memory": "256Mi"}}
    )
    states = [(s.state, s.attempt) for s in statuses]
    assert states == [("registered", 1), ("running", 1), ("finished", 1)], (
        f"one attempt, ended as the agent's outcome: {states} {statuses[-1].error}"
    )
    assert (record.status, record.reward, record.passed) == ("finished", 0.0, False), record
    assert "stopped by itself: the out-of-memory killer ended its PID 1" in statuses[-1].error, (
        f"the verdict says why: {statuses[-1].error}"
    )


def test_a_container_killed_from_outside_stays_an_infrastructure_failure(make_orchestrator, tmp_path):
    """The other side of the rule: a sandbox SIGKILLed from outside mid-rollout (`docker kill`, as
    an engine restart or another process would) says nothing about the agent: a `sandbox` failure
    (retried while attempts are left), never a reward."""
    standin = ensure_standin()
    suite = tmp_path / "suite"
    write_clawgym_task(suite, "sleeps", "Sleep.", "sleep 60\n")
    owner = f"orch-docker-{uuid.uuid4().hex[:8]}"
    docker = {"image": standin, "relay_image": standin, "state_dir": str(tmp_path / "state")}
    served = make_orchestrator(
        sandbox={"backend": "docker", "owner": owner, "docker": docker}, max_attempts=1
    )
    run = served.store.create_run("killed-from-outside")
    batch = Batch(run.id, [RolloutRequest("sleeps", "oracle")], suite=str(suite))
    pending = asyncio.run_coroutine_threadsafe(statuses_of(served.orchestrator, batch), served.loop)
    deadline = time.monotonic() + 60
    while not (names := owned_containers(owner)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert names, "test setup: the sandbox container started"
    time.sleep(2)  # the oracle's sleep runs
    subprocess.run(["docker", "kill", *names], check=True, capture_output=True)
    statuses = pending.result(timeout=120)
    assert [s.state for s in statuses] == ["registered", "running", "failed"], statuses
    assert statuses[-1].failure == "sandbox" and "killed from outside" in statuses[-1].error, statuses[-1]
    assert served.store.get_rollout(statuses[-1].rollout_id).reward is None, "never rewarded"
