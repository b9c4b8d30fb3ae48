"""Task image names: a content hash of the build, the same for the docker backend and kubernetes.

Pure (files only, no engine): the engine-side cache is tested in test_docker_backend.py.
"""

import dataclasses
import os
from pathlib import Path

import pytest

from clawgym.errors import InvalidArgument
from clawgym.sandbox import ImageBuild, KubernetesSandboxConfig, SandboxSpec
from clawgym.sandbox.docker_images import content_hash, image_name, repository_part
from clawgym.sandbox.k8s_pods import base_labels, pod_manifest, pool_key, with_task_image


@pytest.fixture
def context(tmp_path: Path) -> Path:
    (tmp_path / "Dockerfile").write_text("FROM debian:bookworm\nCOPY data /data\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.txt").write_text("one\n")
    return tmp_path


def _build(context: Path) -> ImageBuild:
    return ImageBuild(str(context / "Dockerfile"), str(context), name="My_Task.v2")


def test_the_name_changes_with_any_content_and_only_with_content(context: Path):
    build = _build(context)
    first = image_name(build, "clawgym-task")
    assert first == image_name(build, "clawgym-task"), "an unchanged build keeps its name: never rebuilt"
    assert first.startswith("clawgym-task/my_task.v2:"), f"readable task part, lowercased: {first}"
    (context / "data" / "a.txt").write_text("two\n")
    second = image_name(build, "clawgym-task")
    assert second != first, "a changed context file is a new image"
    os.chmod(context / "data" / "a.txt", 0o755)
    assert image_name(build, "clawgym-task") != second, "a mode change is a new image (COPY keeps modes)"
    (context / "data" / "link").symlink_to("a.txt")
    third = image_name(build, "clawgym-task")
    assert third != second
    (context / "Dockerfile").write_text("FROM debian:bookworm\nCOPY data /srv\n")
    assert image_name(build, "clawgym-task") != third, "a changed Dockerfile is a new image"
    assert content_hash(build, {"BASE": "x"}) != content_hash(build), "build args are part of the content"


def test_a_missing_dockerfile_or_context_is_an_invalid_argument(context: Path):
    with pytest.raises(InvalidArgument, match="Dockerfile"):
        content_hash(ImageBuild(str(context / "nope"), str(context)))
    with pytest.raises(InvalidArgument, match="context"):
        content_hash(ImageBuild(str(context / "Dockerfile"), str(context / "nope")))


def test_repository_parts_are_valid_docker_names():
    assert repository_part("Build Sum/Tool!!") == "build-sum-tool"
    assert repository_part("--") == "task", "nothing usable left: a fixed name"


def test_a_pod_runs_the_tasks_built_image_from_the_registry(context: Path):
    """kubernetes with task_images: the pod's image is the docker backend's name under the registry."""
    cfg = KubernetesSandboxConfig(task_images=True, task_image_registry="registry.local:5000/")
    spec = SandboxSpec(workdir="/app", build=_build(context), image="harness-image:1")
    resolved = with_task_image(spec, cfg)
    expected = f"registry.local:5000/{image_name(_build(context), 'clawgym-task')}"
    assert resolved.image == expected and resolved.build is None
    pod = pod_manifest(name="p", spec=resolved, cfg=cfg, labels=base_labels("o", resolved), deadline_s=60)
    assert pod["spec"]["containers"][0]["image"] == expected, "the task's image, not the harness's"
    other = dataclasses.replace(resolved, image="harness-image:1")
    assert pool_key(resolved, cfg) != pool_key(other, cfg), "warm pods of another image are not shared"
    untouched = SandboxSpec(workdir="/app")
    assert with_task_image(untouched, cfg) is untouched, "no build: the spec's image as before"
