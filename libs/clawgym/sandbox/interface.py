"""The sandbox interface: what the orchestrator needs to run one rollout somewhere isolated.

A sandbox is a writable workspace plus a place to run commands in it: a bubblewrap-isolated
process tree on this machine (`clawgym.sandbox.local`) or a Kubernetes pod
(`clawgym.sandbox.kubernetes`). This module owns only the contract (the spec, the result of a
command, the `Sandbox` and `SandboxBackend` protocols); it knows nothing of harnesses or tasks.

Concurrency: every operation is a coroutine. One backend serves many sandboxes at once from one
event loop (the orchestrator runs 32+); blocking work (processes, the Kubernetes client) happens in
subprocesses or the backend's own thread pool, never on the loop.

Paths are always *sandbox* paths (absolute, as the task sees them: `/app`, `/tests`,
`/root/.openclaw/workspace`). The writable ones are the workspace (`spec.workdir`), every mount,
`spec.home` and `/tmp`, each backed by its own directory of the sandbox's storage (a host directory
on `local`, one emptyDir on `kubernetes`, the container's own filesystem on `docker`); everything else is the read-only system (the host's on `local`, the image's on
`kubernetes`, where the container's own filesystem stays writable). Files are put and read only
inside the writable paths, so code that must run on both backends keeps to them.
"""

import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from clawgym.errors import InvalidArgument, Unavailable
from clawgym.sandbox.environment import check_env

Network = Literal["proxy", "none"]

# Kubernetes label syntax, used for every backend so labels mean the same everywhere.
LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")

MANAGED_BY = "app.kubernetes.io/managed-by"
OWNER_LABEL = "clawgym.dev/owner"
SANDBOX_LABEL = "clawgym.dev/sandbox"
HARNESS_LABEL = "clawgym.dev/harness"
EGRESS_LABEL = "clawgym.dev/egress"
# the backend object (one per process) that made it: `reap` takes a sandbox only once that is gone
INSTANCE_LABEL = "clawgym.dev/instance"


class SandboxFailed(Unavailable):
    """The sandbox machinery failed (pod never started, bubblewrap refused, the API went away).

    An infrastructure failure: the orchestrator retries the rollout and never rewards it. A
    command that runs and fails is not this; it is an `ExecResult` with a non-zero exit code.
    """


class SandboxDied(SandboxFailed):
    """The sandbox ended by itself: what ran in it ended it (its PID 1 killed by the out-of-memory
    killer, or exited), not the machinery around it, which would have removed or killed it from
    outside (`SandboxFailed`). Once the harness has run, the attempt records it as the harness's
    outcome with reward 0, never retried (`orchestrator.attempt`); before, it is a sandbox failure.
    """


@dataclass(frozen=True)
class Resources:
    """Limits of one sandbox. How each backend enforces each field is in its module docstring."""

    cpus: float = 1.0  # kubernetes: limits.cpu; local: not enforced (see cpu_time_s)
    # kubernetes: limits.memory per pod; local: the sandbox's cgroup, and RLIMIT_DATA per process
    memory_mb: int = 2048
    processes: int = 512  # local: the cgroup's pids.max, and RLIMIT_NPROC; kubernetes: node policy
    open_files: int = 4096  # local: RLIMIT_NOFILE; kubernetes: the runtime's default
    cpu_time_s: int | None = None  # local: RLIMIT_CPU per process (None: the sandbox's lifetime)
    # kubernetes: emptyDir sizeLimit; local: the storage's tmpfs size (None: `local.disk_mb`)
    disk_mb: int | None = None


@dataclass(frozen=True)
class ImageBuild:
    """A sandbox image built from a Dockerfile and its context folder (host paths): a task's own
    image. The docker backend builds it (cached by content, `docker_images`); kubernetes runs the
    same name from `sandbox.kubernetes.task_image_registry` when `task_images` is on."""

    dockerfile: str
    context: str
    name: str = ""  # a readable part of the image's name (the task id)
    suite: str = ""  # the suite's name: with `name`, the image's repository (one per suite and task)
    # from an imported suite (a third party's Dockerfile): built without network unless allowed
    # (`sandbox.docker.allow_imported_build_network`)
    imported: bool = False


@dataclass(frozen=True)
class SandboxSpec:
    """What to create. Only `workdir` is needed; the defaults suit a harness run."""

    workdir: str = "/workspace"  # the workspace, writable
    mounts: Sequence[str] = ()  # more writable dirs at task paths: /app, /tests
    home: str = "/root"  # HOME, writable, private to this sandbox
    env: Mapping[str, str] = field(default_factory=dict)  # for every exec (exec's env wins)
    resources: Resources = field(default_factory=Resources)
    timeout_s: float = 3600.0  # lifetime: no exec runs past it
    network: Network = "proxy"  # "proxy": reach the proxy and nothing else; "none": no network
    # the proxy as the caller reaches it (http://host:port); the sandbox reaches it at
    # `SandboxBackend.sandbox_proxy_url(proxy_url)`. Empty: nothing to reach (local: no network)
    proxy_url: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)  # e.g. clawgym.dev/rollout; for GC and listing
    harness: str = ""  # harness name, recorded as a label
    image: str = ""  # kubernetes, docker: container image ("" = default)
    build: ImageBuild | None = None  # docker, kubernetes (task_images): the image to build and run

    def validate(self) -> None:
        """Raises InvalidArgument naming the first bad field."""
        if isinstance(self.mounts, str):
            raise InvalidArgument("mounts: a list of paths, not one string")
        for name, path in [
            ("workdir", self.workdir),
            ("home", self.home),
            *(("mounts", p) for p in self.mounts),
        ]:
            sandbox_path(path, what=name)
        writable = [sandbox_path(p) for p in (self.workdir, self.home, *self.mounts)]
        if len(set(writable)) != len(writable):
            raise InvalidArgument(f"workdir, home and mounts must be distinct paths: {writable}")
        for path in writable:
            if path in ("/", "/tmp", "/proc", "/dev", "/sys") or path.startswith(
                ("/proc/", "/dev/", "/sys/")
            ):
                raise InvalidArgument(f"{path} cannot be a sandbox directory")
        check_env(self.env, "env")
        check_labels(self.labels)
        if self.harness and not LABEL_VALUE.match(self.harness):
            raise InvalidArgument(f"harness: {self.harness!r} is not a valid label value")
        if self.timeout_s <= 0:
            raise InvalidArgument("timeout_s must be > 0")
        if self.network not in ("proxy", "none"):
            raise InvalidArgument(f"network: {self.network!r} is not one of proxy, none")
        if self.proxy_url and not re.match(r"^https?://[^/?#]+", self.proxy_url):
            raise InvalidArgument(f"proxy_url: {self.proxy_url!r} is not an http(s)://host:port URL")
        r = self.resources
        if r.disk_mb is not None and r.disk_mb <= 0:
            raise InvalidArgument("resources: disk_mb must be > 0 (or None)")
        if r.cpus <= 0 or r.memory_mb <= 0 or r.processes <= 0 or r.open_files <= 0:
            raise InvalidArgument("resources: cpus, memory_mb, processes and open_files must be > 0")


@dataclass(frozen=True)
class ExecResult:
    """How one command ended. `exit_code` follows the shell: 128 + N when killed by signal N."""

    exit_code: int
    stdout: bytes
    stderr: bytes
    duration_s: float
    timed_out: bool = False  # the wall-clock limit hit and the whole process tree was killed
    truncated: bool = False  # stdout or stderr went past the backend's max_output_bytes

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


@dataclass(frozen=True)
class FileEnds:
    """The first and last bytes of one file (`Sandbox.read_ends`); `tail` is empty when `head`
    holds the whole file."""

    head: bytes
    tail: bytes
    size: int  # the file's size in bytes when it was read

    @property
    def left_out(self) -> int:
        """Bytes of the middle that were not read."""
        return max(0, self.size - len(self.head) - len(self.tail))


class Sandbox(Protocol):
    """One live sandbox. Every method may raise SandboxFailed; bad paths raise InvalidArgument."""

    id: str
    spec: SandboxSpec

    async def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Writes `data` to the sandbox path `path` (parent directories are created)."""
        ...

    async def put_dir(self, local_dir: Path, dest: str) -> None:
        """Copies the contents of a local directory into the sandbox directory `dest` (merged)."""
        ...

    async def exec(
        self,
        cmd: Sequence[str] | str,
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout_s: float | None = None,
        stdin: bytes | None = None,
    ) -> ExecResult:
        """Runs argv (or a shell string, through `sh -c`) and waits for it and all it started.

        `cwd` defaults to `spec.workdir`. The timeout (capped by what is left of the sandbox's
        lifetime) kills the whole process tree and returns `timed_out=True`; it never raises.
        Cancelling the awaiting task kills the tree too.
        """
        ...

    async def get_file(self, path: str) -> bytes:
        """The bytes of one regular file; NotFound if it does not exist."""
        ...

    async def read_ends(self, path: str, head: int, tail: int) -> FileEnds:
        """At most the first `head` and last `tail` bytes of one regular file (all of it when it is
        no larger than both), never its middle: memory stays bounded whatever the file's size.
        NotFound if it does not exist; InvalidArgument for a link (never followed) or a non-file."""
        ...

    async def get_tar(self, path: str) -> bytes:
        """An uncompressed tar of a file or directory, its members named relative to `path`'s parent."""
        ...

    async def reset_dir(self, path: str) -> None:
        """Kills whatever the sandbox still runs, then empties the writable directory `path` (the
        workspace, HOME, /tmp or a mount; not a path below one) from outside, whatever its processes
        did to it (modes, links). Writable directories nested in it keep their contents.
        SandboxFailed if it cannot be emptied."""
        ...

    async def seal_dir(self, path: str) -> None:
        """Makes the writable directory `path` read-only to every later exec (put its files in first)."""
        ...

    async def destroy(self) -> None:
        """Kills everything still running and deletes the sandbox. Idempotent."""
        ...


class SandboxBackend(Protocol):
    """Makes sandboxes; one per orchestrator. `owner` and `instance` label everything it creates.

    `owner` is `sandbox.owner`, else the host name: stable across restarts, shared by every process
    configured alike. `instance` is this backend object's own (unique per process), and each backend
    records whether an instance still lives (`sandbox.owners`), so processes sharing an owner never
    delete each other's live sandboxes. `lease_name` names the orchestrator in the store's leases.
    """

    name: str
    owner: str
    instance: str
    lease_name: str
    # whether sandboxes run a task's own image (`SandboxSpec.build`): then the task's Dockerfile is
    # not turned into host setup steps (`tasks.model.Task.in_own_image`)
    task_images: bool

    async def create(self, spec: SandboxSpec) -> Sandbox:
        """Returns a sandbox ready to exec in. InvalidArgument for a bad spec, SandboxFailed otherwise."""
        ...

    def sandbox_proxy_url(self, proxy_url: str) -> str:
        """The URL at which a sandbox with `spec.proxy_url=proxy_url` reaches the proxy (what its
        harness is told): local, a relay on the sandbox's own loopback; kubernetes, the same URL."""
        ...

    async def reap(self, owner: str | None = None) -> int:
        """Deletes sandboxes labelled with `owner` (default: ours) that this object does not hold and
        whose instance is gone (a crashed predecessor's) or is this object; a live instance's are
        kept, whoever asks. Run at start-up. Returns how many.
        """
        ...

    async def close(self) -> None:
        """Destroys the sandboxes this backend still holds and frees its resources."""
        ...


# --- path and label checks shared by the backends ---


def sandbox_path(path: str, *, what: str = "path") -> str:
    """The normalised absolute sandbox path; InvalidArgument for relative paths or `..` tricks."""
    if not isinstance(path, str) or not path.startswith("/") or "\0" in path:
        raise InvalidArgument(f"{what}: {path!r} is not an absolute path")
    norm = posixpath.normpath(path)
    if norm.startswith("//"):
        norm = "/" + norm.lstrip("/")
    if ".." in norm.split("/"):
        raise InvalidArgument(f"{what}: {path!r} escapes the root")
    return norm


def exec_argv(cmd: Sequence[str] | str, cwd: str | None, workdir: str) -> tuple[list[str], str]:
    """(argv, cwd) of an exec: a shell string runs through `/bin/sh -c`; `cwd` defaults to the workdir."""
    argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
    if not argv:
        raise InvalidArgument("exec: empty command")
    return argv, sandbox_path(cwd or workdir, what="cwd")


def storage_layout(spec: SandboxSpec) -> list[tuple[str, str]]:
    """(storage dir name, sandbox path) of every writable directory, parents before children.

    Both backends back each writable sandbox path with its own directory of one storage area, so
    `/app` and `/tests` never alias and the order makes nested paths (a mount under HOME) work.
    """
    dirs = [("work", spec.workdir), ("home", spec.home), ("tmp", "/tmp")]
    dirs += [(f"mount{i}", path) for i, path in enumerate(spec.mounts)]
    dirs = [(name, sandbox_path(path)) for name, path in dirs]
    return sorted(dirs, key=lambda d: (d[1].count("/"), d[1]))


def locate(spec: SandboxSpec, path: str, strict: bool = False) -> tuple[str, list[str]]:
    """(storage dir name, components below it) of a sandbox path inside a writable directory.

    The deepest writable directory wins (a mount under HOME). strict: only a directory strictly
    above `path` counts (where the mount point of `path` itself lives). InvalidArgument otherwise.
    """
    norm = sandbox_path(path)
    best: tuple[str, str] | None = None
    for name, dest in storage_layout(spec):
        inside = norm.startswith(dest.rstrip("/") + "/") or (norm == dest and not strict)
        if inside and (best is None or len(dest) > len(best[1])):
            best = (name, dest)
    if best is None:
        writable = ", ".join(dest for _, dest in storage_layout(spec))
        raise InvalidArgument(f"{path} is outside the sandbox's writable directories ({writable})")
    rest = norm[len(best[1]) :].strip("/")
    return best[0], [p for p in rest.split("/") if p]


def writable_dir(spec: SandboxSpec, path: str) -> tuple[str, list[str]]:
    """(storage dir name, sandbox paths of the writable dirs nested in it) of a writable directory
    itself (what `reset_dir` and `seal_dir` take); InvalidArgument for any other path."""
    norm = sandbox_path(path)
    names = {dest: name for name, dest in storage_layout(spec)}
    if norm not in names:
        raise InvalidArgument(f"{path} is not one of the sandbox's writable directories")
    nested = [dest for dest in names if dest.startswith(norm.rstrip("/") + "/")]
    return names[norm], nested


def check_labels(labels: Mapping[str, str]) -> None:
    """InvalidArgument unless every key and value is valid Kubernetes label syntax."""
    for key, value in labels.items():
        if not LABEL_KEY.match(key) or not LABEL_VALUE.match(value):
            raise InvalidArgument(f"labels: {key}={value!r} is not a valid label")


def label_value(text: str) -> str:
    """`text` squeezed into a valid label value (used for owners derived from host names)."""
    value = re.sub(r"[^A-Za-z0-9_.-]", "-", text)[:63].strip("-_.")
    return value or "clawgym"
