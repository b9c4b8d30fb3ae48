"""Task images: named by the content of their build, built once per content.

A task's `ImageBuild` (its Dockerfile and context folder) is named
`<repository>/<suite>/<task>:<hash>`, the hash covering the Dockerfile, every file of the context
(path, type, mode, link target, bytes) and the build arguments. The name alone says whether the
image is current: an unchanged task is never rebuilt, an edited one gets a new name. Every file
counts, `.dockerignore`d ones too: a change there rebuilds for nothing, but nothing stale is ever
run. The suite is part of the repository, so replacing a task's older images (`remove_replaced_images`)
never touches another suite's task of the same id.

Network: building is the suite author's step, and a Dockerfile's RUN can reach whatever the build
network reaches (on the default bridge: the internet and this host's services on its bridge
address). An imported suite's Dockerfiles (`ImageBuild.imported`: a third party's) build with
`--network none` unless `allow_imported_build_network`; other builds use `build_network`.

`TaskImages.ensure` builds at most once per name at a time: concurrent rollouts of one task in this
process wait on one asyncio lock, other processes on a file lock, and each looks for the image
again before building. The kubernetes backend names the same image (`image_name`) to run it.
The builder pulls what the Dockerfile's FROM names, as `docker build` does; on a machine without a
registry, tag a local stand-in with that name first (the classic builder then uses it as is).
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import logging
import os
import re
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path

from clawgym.errors import InvalidArgument
from clawgym.sandbox.config import DockerSandboxConfig
from clawgym.sandbox.docker_cli import DockerCli, error_text
from clawgym.sandbox.interface import MANAGED_BY, ImageBuild, SandboxFailed

log = logging.getLogger(__name__)

CONTENT_LABEL = "clawgym.dev/content"
TASK_LABEL = "clawgym.dev/task-image"
_CHUNK = 1 << 20


def content_hash(build: ImageBuild, build_args: Mapping[str, str] | None = None) -> str:
    """sha256 (hex) of everything that decides the image: Dockerfile, context tree, build args."""
    context, dockerfile = Path(build.context), Path(build.dockerfile)
    if not context.is_dir():
        raise InvalidArgument(f"image build context {context} is not a directory")
    if not dockerfile.is_file():
        raise InvalidArgument(f"Dockerfile {dockerfile} does not exist")
    digest = hashlib.sha256()

    def feed(*parts: object) -> None:
        for part in parts:
            data = part if isinstance(part, bytes) else str(part).encode()
            digest.update(len(data).to_bytes(8, "big") + data)

    feed("dockerfile", dockerfile.read_bytes())
    for name, value in sorted((build_args or {}).items()):
        feed("arg", name, value)
    for path in sorted(context.rglob("*"), key=lambda p: p.relative_to(context).as_posix()):
        rel = path.relative_to(context).as_posix()
        st = path.lstat()
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            feed("link", rel, os.readlink(path))
        elif stat.S_ISDIR(st.st_mode):
            feed("dir", rel, mode)
        elif stat.S_ISREG(st.st_mode):
            file_digest = hashlib.sha256()
            with open(path, "rb") as f:
                while chunk := f.read(_CHUNK):
                    file_digest.update(chunk)
            feed("file", rel, mode, file_digest.digest())
        else:
            feed("other", rel, stat.S_IFMT(st.st_mode))
    return digest.hexdigest()


def repository_part(text: str) -> str:
    """`text` as one path component of an image repository: lowercase [a-z0-9], separated by . _ -"""
    part = re.sub(r"[^a-z0-9._-]+", "-", text.lower())
    part = re.sub(r"[._-]{2,}", "-", part).strip("._-")
    return part[:100] or "task"


def image_name(build: ImageBuild, repository: str, build_args: Mapping[str, str] | None = None) -> str:
    """`<repository>/<suite>/<task>:<hash>` (no suite part when the build names none), the name the
    docker backend builds and kubernetes runs."""
    tag = content_hash(build, build_args)[:32]
    parts = [repository.rstrip("/"), *([repository_part(build.suite)] if build.suite else [])]
    parts.append(repository_part(build.name or Path(build.context).name))
    return f"{'/'.join(parts)}:{tag}"


def build_network(build: ImageBuild, cfg: DockerSandboxConfig) -> str:
    """The --network of `build` ("" = the engine's default): none for an imported suite's
    Dockerfile unless the config allows it (module docstring)."""
    if build.imported and not cfg.allow_imported_build_network:
        return "none"
    return cfg.build_network


class TaskImages:
    """Builds task images on one engine, each content once."""

    def __init__(self, cli: DockerCli, cfg: DockerSandboxConfig, lock_dir: Path) -> None:
        self.cli, self.cfg, self.lock_dir = cli, cfg, lock_dir
        self.builds = 0  # images this object built (the rest were there already)
        self._locks: dict[str, asyncio.Lock] = {}

    async def ensure(self, build: ImageBuild) -> str:
        """The image's name, built first unless the engine has it; SandboxFailed if the build fails."""
        name = await asyncio.to_thread(image_name, build, self.cfg.image_repository, self.cfg.build_args)
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            # A thread, not the loop: a build takes minutes. Cancelled, it still finishes (for the
            # next rollout of the task) while the caller moves on.
            await asyncio.to_thread(self._ensure_locked, build, name)
        return name

    def exists(self, name: str) -> bool:
        done = self.cli.run_sync(["image", "inspect", "--format", "{{.Id}}", name], timeout_s=60)
        return done.returncode == 0

    def _ensure_locked(self, build: ImageBuild, name: str) -> None:
        if self.exists(name):
            return
        self.lock_dir.mkdir(parents=True, exist_ok=True)
        key = hashlib.sha256(name.encode()).hexdigest()[:16]
        with open(self.lock_dir / f"build-{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building it right now
            if self.exists(name):
                return
            self._build(build, name)

    def _build(self, build: ImageBuild, name: str) -> None:
        repository, _, tag = name.rpartition(":")
        # --force-rm: a failed step's container goes too (the classic builder keeps it otherwise)
        args = [
            "build",
            "--quiet",
            "--force-rm",
            "--file",
            str(Path(build.dockerfile).resolve()),
            "--tag",
            name,
        ]
        args += ["--label", f"{MANAGED_BY}=clawgym", "--label", f"{CONTENT_LABEL}={tag}"]
        args += ["--label", f"{TASK_LABEL}={repository}"]
        for arg, value in self.cfg.build_args.items():
            args += ["--build-arg", f"{arg}={value}"]
        network = build_network(build, self.cfg)
        if network:
            args += ["--network", network]
        log.info("building task image %s from %s (network: %s)", name, build.context, network or "default")
        done = self.cli.run_sync(
            [*args, str(Path(build.context).resolve())], timeout_s=self.cfg.build_timeout_s
        )
        if done.returncode != 0:
            offline = " (an imported suite's: built without network)" if network == "none" else ""
            raise SandboxFailed(f"building the task image {name}{offline} failed: {error_text(done)}")
        self.builds += 1
        if self.cfg.remove_replaced_images:
            self._remove_replaced(repository, name)

    def _remove_replaced(self, repository: str, keep: str) -> None:
        """Removes this task's images of earlier contents (built by us: labelled); one a container
        still uses stays (the engine refuses, which is fine)."""
        listed = self.cli.run_sync(
            [
                "image",
                "ls",
                "--filter",
                f"label={TASK_LABEL}={repository}",
                "--format",
                "{{.Repository}}:{{.Tag}}",
            ],
            timeout_s=60,
        )
        for old in listed.stdout.decode().split():
            if old != keep and old.startswith(f"{repository}:"):
                self.cli.run_sync(["image", "rm", old], timeout_s=120)


def default_state_dir() -> Path:
    return Path(tempfile.gettempdir()) / "clawgym-docker"
