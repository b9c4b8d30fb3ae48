"""The docker-compose deployment, for real: images built, `up` trains, crashes survived, every panel has data.

One module-scoped run (tests/deploy/compose_run.yaml: 3 GRPO steps through the reference harness on
the mini suite, then Pass@1) on the images `deploy/images.py` builds, with the stand-ins of
deploy/compose/local.yml where this machine cannot pull official images. While it trains, the
proxy and then the store crash (SIGKILL to the container's process, as the OOM killer would):
compose restarts them and the run finishes. Needs a Docker engine (../shared/docker-local makes one;
`.ci/run` starts it); skipped where none answers.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from deploy.compose_stack import ComposeStack, RunFacts

# the first test builds the images (cold: ~20 min on 2 cores) and the run takes minutes
pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(3600)]

SERVICES = ("store", "inference", "proxy", "orchestrator", "trainer")
SECRET = ["-e", "CLAWGYM_RPC__SECRET=image-check-only"]  # a gRPC service without one does not start


@dataclass
class ComposeRun:
    stack: ComposeStack
    facts: RunFacts
    panels: dict[str, int]
    up_s: float


@pytest.fixture(scope="module")
def compose_run(docker_images: dict) -> Iterator[ComposeRun]:
    stack = ComposeStack("clawgym-test", "tests/deploy/compose_run.yaml", local=True)
    stack.down()  # what an interrupted earlier run left
    try:
        up_s = stack.up()
        facts = stack.follow_run(crash=["proxy", "store"])
        panels = stack.panel_results(facts.started_at - 30, facts.ended_at + 30)
        yield ComposeRun(stack, facts, panels, up_s)
    finally:
        stack.down()


def test_the_run_trains_its_steps_and_exits_cleanly(compose_run: ComposeRun):
    f = compose_run.facts
    assert f.trainer_exit == 0
    assert f.steps >= 3, f
    assert len(f.checkpoints) >= 3, f.checkpoints
    assert f.groups_consumed >= 3, "every step trains at least one group"


def test_every_call_and_group_is_in_postgres_and_announced_on_redis(compose_run: ComposeRun):
    f = compose_run.facts
    assert f.calls > 0
    assert f.rollouts.get("finished", 0) >= 3 * 2 * 4 * 0.5, f.rollouts  # most of 3 steps × 2 groups × 4
    assert f.groups >= 6
    assert f.groups_announced >= f.groups_consumed, "each trained group was announced on groups.ready"


def test_the_inference_container_hot_reloads_each_checkpoint(compose_run: ComposeRun):
    f = compose_run.facts
    assert len(f.versions_served) >= 2, f.versions_served
    assert set(f.versions_served) <= set(f.checkpoints), "it served only published checkpoints"
    assert max(f.versions_served) == max(f.checkpoints), "the last checkpoint is what it serves at the end"


def test_pass_at_1_is_evaluated_at_the_end(compose_run: ComposeRun):
    assert set(compose_run.facts.pass_at_1) == {"reference"}
    assert 0.0 <= compose_run.facts.pass_at_1["reference"] <= 1.0


def test_the_trainer_service_leaves_the_run_folder_clawgym_train_leaves(compose_run: ComposeRun):
    """report, summary, TensorBoard events and the evaluations of every step, beside the checkpoints."""
    folder = compose_run.stack.run_folder("compose-test")
    assert {"report.md", "report.json", "summary.json", "run.json", "tensorboard"} <= set(folder["files"]), folder
    assert folder["events"] >= 1, folder
    assert folder["labels"] == ["after", "step 1", "step 2"], folder["labels"]
    assert folder["summary"]["steps"] >= 3 and "pass1_after" in folder["summary"], folder["summary"]


def test_crashed_proxy_and_store_are_restarted_and_no_acknowledged_call_is_lost(compose_run: ComposeRun):
    f = compose_run.facts
    assert f.crashed == ["proxy", "store"]
    assert f.restarts["proxy"] >= 1 and f.restarts["store"] >= 1, f.restarts
    assert f.acked_calls > 0, "the proxy logs every call the store acknowledged"
    assert f.calls_lost == 0, (
        f"{f.calls_lost} of {f.acked_calls} acknowledged calls are missing from PostgreSQL"
    )


def test_every_dashboard_panel_has_data_from_the_run(compose_run: ComposeRun):
    empty = [query for query, series in compose_run.panels.items() if series == 0]
    assert len(compose_run.panels) >= 40
    assert not empty, "panels without data:\n" + "\n".join(empty)


def test_each_service_runs_as_its_non_root_user(compose_run: ComposeRun):
    for service in SERVICES:
        assert compose_run.stack.inspect(service, "{{.Config.User}}") == "10001:10001", service
    for service in ("store", "inference", "proxy", "orchestrator"):  # running (the trainer has exited)
        uid = compose_run.stack.compose("exec", "-T", service, "id", "-u").stdout.strip()
        assert uid == "10001", service


def test_down_leaves_nothing_running(compose_run: ComposeRun):
    compose_run.stack.down()
    assert compose_run.stack.running() == []
    volumes = subprocess.run(["docker", "volume", "ls", "-q", "--filter", "label=com.docker.compose.project=clawgym-test"],
                             capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    assert volumes == []


def test_the_cluster_orchestrator_image_starts_healthy_as_its_user(docker_images: dict):
    """The one service image compose does not run (its sandboxes are pods): started alone with local
    sandboxes, it answers its health check as uid 10001; without a cluster it says so and exits."""
    tag = docker_images["orchestrator"]["tag"]
    name = "clawgym-test-orchestrator-image"
    subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    try:
        # this image has no bubblewrap: local sandboxes are unisolated, which must be allowed explicitly
        local = ["-e", "CLAWGYM_SANDBOX__BACKEND=local", "-e", "CLAWGYM_SANDBOX__LOCAL__ALLOW_UNISOLATED=true"]
        subprocess.run(["docker", "run", "-d", "--name", name, *SECRET, *local, tag], check=True, capture_output=True)  # fmt: skip
        state = ""
        for _ in range(60):
            state = subprocess.run(["docker", "inspect", "-f", "{{.State.Status}} {{.State.Health.Status}}", name],
                                   capture_output=True, text=True).stdout.strip()  # fmt: skip
            if state == "running healthy":
                break
            time.sleep(2)
        logs = subprocess.run(["docker", "logs", "--tail", "30", name], capture_output=True, text=True)
        assert state == "running healthy", f"{state}\n{logs.stdout}{logs.stderr}"
        uid = subprocess.run(
            ["docker", "exec", name, "id", "-u"], capture_output=True, text=True
        ).stdout.strip()
        assert uid == "10001"
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    done = subprocess.run(["docker", "run", "--rm", *SECRET, tag], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "kubeconfig" in done.stderr + done.stdout, "without a cluster it says why"


@pytest.mark.parametrize(
    ("image", "argv", "uid"),
    [("sandbox-python", ["mini", "--help"], "1000"), ("sandbox-codex", ["codex", "--version"], "1000")],
)
def test_sandbox_images_run_their_harness_as_the_sandbox_user(
    docker_images: dict, image: str, argv: list, uid: str
):
    """The images sandbox pods run: the harness CLI answers, as the unprivileged sandbox user."""
    tag = docker_images[image]["tag"]
    done = subprocess.run(["docker", "run", "--rm", tag, *argv], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    who = subprocess.run(
        ["docker", "run", "--rm", tag, "id", "-u"], capture_output=True, text=True, timeout=120
    )
    assert who.stdout.strip() == uid
