"""Which tasks a batch may name depends on the backend: one that runs task images takes a task
whose Dockerfile the local backend refuses. No sandbox starts here."""

import asyncio
from pathlib import Path

import pytest

from clawgym.errors import FailedPrecondition
from clawgym.orchestrator.catalog import Catalog
from clawgym.orchestrator.interface import Batch, RolloutRequest
from clawgym.sandbox import SandboxConfig

SUITE = Path(__file__).parents[1] / "tasks" / "data" / "terminal-bench"


def _batch(task_id: str) -> Batch:
    return Batch(run_id="r", rollouts=[RolloutRequest(task_id, "nop")], suite=str(SUITE))


def test_a_task_needing_its_own_image_is_refused_locally_and_taken_by_an_image_backend():
    with pytest.raises(FailedPrecondition, match="not a package install"):
        asyncio.run(Catalog().resolve(_batch("build-sum-tool")))
    [(task, adapter)] = asyncio.run(Catalog(task_images=True).resolve(_batch("build-sum-tool")))
    assert task.id == "build-sum-tool" and adapter.name == "nop"


def test_services_besides_the_task_container_are_refused_by_every_backend():
    with pytest.raises(FailedPrecondition, match="needs services besides the task container"):
        asyncio.run(Catalog(task_images=True).resolve(_batch("needs-postgres")))


def test_docker_sandboxes_see_the_harness_cache():
    cfg = SandboxConfig(backend="docker").with_ro_paths(["/opt/cache"])
    assert cfg.backend == "docker"
    assert cfg.docker.ro_paths[-1] == "/opt/cache" and cfg.local.ro_paths[-1] == "/opt/cache"
