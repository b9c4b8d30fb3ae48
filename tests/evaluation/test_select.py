"""Which tasks an evaluation picks: those the configured sandbox backend can run."""

from pathlib import Path

from clawgym.evaluation.select import eval_tasks
from clawgym.sandbox.config import SandboxConfig

SUITE = Path(__file__).resolve().parents[1] / "tasks" / "data" / "terminal-bench"


def test_a_task_that_needs_its_own_image_is_evaluated_only_by_a_backend_that_builds_it():
    local = {t.id for t in eval_tasks(str(SUITE), split="", task_images=SandboxConfig().task_images)}
    docker = {t.id for t in eval_tasks(str(SUITE), split="", task_images=SandboxConfig(backend="docker").task_images)}
    assert "build-sum-tool" not in local, f"the local backend cannot build the task's image: {local}"
    assert "build-sum-tool" in docker and "csv-total" in docker, f"docker runs it in its own image: {docker}"
    assert "needs-postgres" not in docker, "no backend starts the compose service it needs"
    k8s = SandboxConfig(backend="kubernetes", kubernetes={"task_images": True})
    assert k8s.task_images and not SandboxConfig(backend="kubernetes").task_images
