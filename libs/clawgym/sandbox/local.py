"""The `local` sandbox backend: a storage directory on this machine and bubblewrap'd process trees.

A sandbox is a directory `<root_dir>/<id>/` holding `meta.json` (owner, instance, labels: what
`reap` reads; `owners` keeps each instance's liveness in `<root_dir>/.owners`), the sandbox's
passwd/group files, and `fs/<name>/`, one directory per writable sandbox
path (see `interface.storage_layout`). Nothing runs between execs: each exec is its own bwrap (its
own PID and network namespaces), and everything it started dies with it. So put/get touch the
storage directly, with symlink-safe path walking, and never race a sandboxed process.

Network: each exec's namespace holds only loopback; with network="proxy" and a `spec.proxy_url`,
the proxy's port on the sandbox's 127.0.0.1 is relayed to the proxy by this process (`relay`), and
the harness is told `sandbox_proxy_url(...)`. Nothing else is reachable, host loopback included.

Limits (`Resources`) here: with `caps` available (root: cgroup v1 or v2, tmpfs), memory_mb and
processes cap the sandbox's cgroup (all its processes together; an OOM kill in it stops the whole
exec, exit 137) and disk_mb (default `local.disk_mb`) is the size of the tmpfs holding its storage
(a write past it fails with ENOSPC). Always, as well: memory_mb is RLIMIT_DATA per process (it
counts heap and private mappings but not the address space node reserves, so V8 works); processes
is RLIMIT_NPROC of the sandbox's uid; open_files is RLIMIT_NOFILE; cpu_time_s is RLIMIT_CPU per
process (default: the sandbox's lifetime x cpus). cpus is not enforced. Without caps (unprivileged,
e.g. the compose container) only the rlimits hold and the disk is not capped. The wall-clock limit
kills the tree.

Isolation is described in `local_bwrap`. With `isolation="none"` (or "auto" where bubblewrap
cannot run) commands run as plain process groups with the same rlimits and uid, see host paths and
the host's network (every local service), cannot use task mounts, and a descendant that calls
setsid survives the timeout: tests and development only, refused unless `allow_unisolated`, and
logged as a warning.

The verifier's clean context: `reset_dir` renames a writable directory's storage away on the host
and makes a new empty one (nothing the sandbox did inside can keep it); `seal_dir` binds one
read-only in every later exec and, run as root, gives its files to root. Without bubblewrap a
sealed directory is not read-only.
"""

import asyncio
import contextlib
import getpass
import json
import logging
import math
import os
import secrets
import shutil
import socket
import stat
import sys
import tarfile
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from clawgym.errors import FailedPrecondition, InvalidArgument, NotFound
from clawgym.sandbox import archive, cgroups, file_ends, relay, tmpfs
from clawgym.sandbox.cgroups import SandboxCgroup
from clawgym.sandbox.config import SandboxConfig
from clawgym.sandbox.environment import DEFAULT_PATH, LAUNCHER_ENV, check_env
from clawgym.sandbox.interface import (
    ExecResult,
    FileEnds,
    SandboxFailed,
    SandboxSpec,
    exec_argv,
    locate,
    sandbox_path,
    storage_layout,
    writable_dir,
)
from clawgym.sandbox.local_bwrap import (
    SANDBOX_USER,
    Bind,
    Listen,
    UidPool,
    bwrap_argv,
    env_args_fd,
    identity_files,
    kill_uid,
    probe_bwrap,
    rlimit_prefix,
    sandbox_python,
    system_binds,
    uid_is_free,
)
from clawgym.sandbox.owners import InstanceLocks, Ownership
from clawgym.sandbox.process import run_tree, stopped_by

log = logging.getLogger(__name__)


class LocalBackend:
    """Makes local sandboxes. Construct once per process; it probes bubblewrap at construction."""

    name = "local"
    task_images = False  # the host's system is the sandbox's: a task image's Dockerfile is replayed

    def __init__(self, cfg: SandboxConfig) -> None:
        self.cfg = cfg
        self.ownership = Ownership(cfg.owner)
        relay.allow_open_files()  # each relayed connection costs two descriptors
        self.owner, self.instance = self.ownership.owner, self.ownership.instance
        self.lease_name = self.ownership.lease_name
        self.root = Path(cfg.local.root_dir or Path(tempfile.gettempdir()) / "clawgym-sandboxes")
        self.as_root = os.geteuid() == 0
        # 0711: a sandbox uid may traverse to its own storage but cannot list the others
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o711)
        self.locks = InstanceLocks(self.root / ".owners")
        self.locks.hold(self.owner, self.instance)
        self.system = system_binds(cfg.local.system_paths)
        self.ro_paths = [Path(p).expanduser() for p in cfg.local.ro_paths]
        self.uids = (
            UidPool(self.root / ".uids", cfg.local.uid_base, cfg.local.uid_count) if self.as_root else None
        )
        self.isolation = self._choose_isolation()
        self.python = sandbox_python(cfg.local.system_paths) if self.isolation == "bwrap" else None
        self.cgroups, self.tmpfs = self._choose_caps()
        self._live: dict[str, LocalSandbox] = {}

    def _choose_isolation(self) -> str:
        wanted = self.cfg.local.isolation
        problem = "isolation is none"
        if wanted != "none":
            problem = probe_bwrap(self.as_root, self.system)
            if problem is None:
                return "bwrap"
            if wanted == "bwrap":
                raise SandboxFailed(f"local sandboxes need bubblewrap: {problem}")
        if not self.cfg.local.allow_unisolated:
            raise SandboxFailed(
                f"local sandboxes would run without isolation ({problem}): they would see this "
                "host's files and reach every service on its network, not just the proxy. Install "
                "bubblewrap, or set sandbox.local.allow_unisolated to run them anyway"
            )
        log.warning(
            "local sandboxes run WITHOUT isolation (%s): plain process groups that see this host's "
            "files and share its network, so they can reach every service on it, not just the proxy",
            problem,
        )
        return "none"

    def _choose_caps(self) -> tuple[cgroups.Cgroups | None, bool]:
        """(where sandbox cgroups go, whether storage can be a tmpfs), per `local.caps`."""
        mode = self.cfg.local.caps
        if mode == "off" or self.isolation == "none":
            return None, False  # unisolated: nothing to cap per sandbox (it warned already)
        found = cgroups.probe()
        disk_problem = tmpfs.probe(self.root)
        problems = [p for p in (None if isinstance(found, cgroups.Cgroups) else found, disk_problem) if p]
        if problems and mode == "required":
            raise SandboxFailed(f"local sandbox caps are required but unavailable: {'; '.join(problems)}")
        if problems:
            log.warning(
                "local sandboxes are not capped per sandbox (memory and processes per process/uid "
                "only%s): %s",
                ", disk not at all" if disk_problem else "",
                "; ".join(problems),
            )
        return (found if isinstance(found, cgroups.Cgroups) else None), disk_problem is None

    def sandbox_proxy_url(self, proxy_url: str) -> str:
        if self.isolation == "none" or not proxy_url:
            return proxy_url  # the host's network: the proxy is where this process sees it
        return relay.sandbox_url(proxy_url)

    async def create(self, spec: SandboxSpec) -> "LocalSandbox":
        spec.validate()
        if self.isolation == "none" and spec.mounts:
            raise FailedPrecondition(
                "task mounts (/app, /tests, ...) need bubblewrap; this backend runs without it"
            )
        if self.isolation == "bwrap":
            self._check_mount_points(spec)
            if spec.network == "proxy" and spec.proxy_url and self.python is None:
                raise SandboxFailed(
                    "no python3 in the sandbox's system paths to open its way to the proxy "
                    f"(looked at {sys.executable}, /usr/bin/python3, /usr/local/bin/python3)"
                )
        sandbox_id = f"{int(time.time())}-{secrets.token_hex(6)}"
        sandbox = await asyncio.to_thread(LocalSandbox.make, self, sandbox_id, spec)
        self._live[sandbox_id] = sandbox
        return sandbox

    def _check_mount_points(self, spec: SandboxSpec) -> None:
        # bwrap can only create a mount point on its tmpfs root, not inside a read-only system dir
        system_roots = [p for p in self.cfg.local.system_paths if os.path.exists(p)]
        for _, path in storage_layout(spec):
            inside = [r for r in system_roots if path == r or path.startswith(r.rstrip("/") + "/")]
            if inside and not os.path.isdir(path):
                raise InvalidArgument(
                    f"{path}: no such directory in the read-only system ({inside[0]}) to mount on"
                )

    async def reap(self, owner: str | None = None) -> int:
        owner = owner or self.owner
        return await asyncio.to_thread(self._reap, owner)

    def _reap(self, owner: str) -> int:
        reaped, left = 0, set()
        for entry in self.root.iterdir():
            meta_path = entry / "meta.json"
            if entry.name in self._live or not meta_path.is_file():
                continue
            try:
                meta = json.loads(meta_path.read_text())
            except (OSError, ValueError):
                continue
            if meta.get("owner") != owner:
                continue
            instance = str(meta.get("instance", ""))
            if not self.ownership.reapable(instance, self.locks.liveness(owner, instance)):
                left.add(instance)  # a live instance's (or one this machine cannot tell)
            else:
                uid = meta.get("uid")
                # its processes may outlive a killed owner; the uid is safe to kill once unheld
                if isinstance(uid, int) and self.uids is not None and uid_is_free(self.uids.lock_dir, uid):
                    kill_uid(uid)
                if self.cgroups is not None:
                    self.cgroups.leftovers(entry.name).remove()
                tmpfs.unmount(entry / "fs")
                shutil.rmtree(entry, ignore_errors=True)
                reaped += 1
        for instance in self.locks.dead(owner):  # a gone instance's record, once nothing of it is left
            if instance not in left:
                self.locks.forget(owner, instance)
        return reaped

    def forget(self, sandbox_id: str) -> None:
        self._live.pop(sandbox_id, None)

    async def close(self) -> None:
        await asyncio.gather(*(s.destroy() for s in list(self._live.values())), return_exceptions=True)
        self.locks.release()

    def base_env(self, spec: SandboxSpec, storage: Mapping[str, Path]) -> dict[str, str]:
        """The environment every exec starts from (nothing of the host's leaks in)."""
        home, tmp = spec.home, "/tmp"
        if self.isolation == "none":
            home, tmp = str(storage["home"]), str(storage["tmp"])
        user = SANDBOX_USER if self.as_root else getpass.getuser()  # not root: the command keeps our uid
        return {
            "PATH": DEFAULT_PATH,
            "HOME": home,
            "TMPDIR": tmp,
            "LANG": "C.UTF-8",
            "SHELL": "/bin/sh",
            "USER": user,
            "LOGNAME": user,
        }


class LocalSandbox:
    """One local sandbox. Build with `LocalBackend.create`."""

    def __init__(
        self,
        backend: LocalBackend,
        sandbox_id: str,
        spec: SandboxSpec,
        storage: Path,
        uid: int | None,
        uid_lock: int | None,
        cgroup: SandboxCgroup | None = None,
    ) -> None:
        self.backend, self.id, self.spec, self.storage = backend, sandbox_id, spec, storage
        self.uid, self._uid_lock, self.cgroup = uid, uid_lock, cgroup
        self.proxy = relay.proxy_address(spec.proxy_url) if spec.proxy_url else None
        # the connections it holds to the proxy, all its execs' relays together
        self.relay_cap = relay.ConnectionCap(sandbox_id, backend.cfg.relay_max_connections)
        self.layout = storage_layout(spec)
        self.dirs = {name: storage / "fs" / name for name, _ in self.layout}
        self.deadline = time.monotonic() + spec.timeout_s
        self.sealed: set[str] = set()  # storage dir names bound read-only (`seal_dir`)
        self._running: set[asyncio.Task] = set()
        self._destroyed = False

    @classmethod
    def make(cls, backend: LocalBackend, sandbox_id: str, spec: SandboxSpec) -> "LocalSandbox":
        uid, lock = backend.uids.acquire() if backend.uids else (None, None)
        storage = backend.root / sandbox_id
        cgroup = None
        try:
            (storage / "fs").mkdir(parents=True, mode=0o711)
            os.chmod(storage, 0o711)
            disk_mb = spec.resources.disk_mb or backend.cfg.local.disk_mb
            if backend.tmpfs and disk_mb:
                tmpfs.mount(storage / "fs", disk_mb << 20)
            if backend.cgroups is not None:
                r = spec.resources
                cgroup = backend.cgroups.make(sandbox_id, memory_bytes=r.memory_mb << 20, pids=r.processes)
            labels = dict(spec.labels)
            meta = {
                "id": sandbox_id,
                "owner": backend.owner,
                "instance": backend.instance,
                "labels": labels,
                "harness": spec.harness,
                "uid": uid,
                "created": time.time(),
                "pid": os.getpid(),
            }
            (storage / "meta.json").write_text(json.dumps(meta))
            sandbox = cls(backend, sandbox_id, spec, storage, uid, lock, cgroup)
            for path in sandbox.dirs.values():
                path.mkdir(mode=0o700)
                sandbox._own(path)
            if uid is not None:
                identity_files(storage, uid, spec.home)
            return sandbox
        except BaseException:
            if cgroup is not None:
                cgroup.remove()
            tmpfs.unmount(storage / "fs")
            shutil.rmtree(storage, ignore_errors=True)
            if lock is not None:
                os.close(lock)
            raise

    # --- paths: sandbox path -> storage, never following a link the sandbox planted ---

    def _own(self, path: Path | str, dir_fd: int | None = None) -> None:
        if self.uid is not None:
            os.chown(path, self.uid, self.uid, dir_fd=dir_fd, follow_symlinks=False)

    def _locate(self, path: str, strict: bool = False) -> tuple[Path, list[str]]:
        """(storage dir on the host, path components below it); see `interface.locate`."""
        name, parts = locate(self.spec, path, strict)
        return self.dirs[name], parts

    def _open_dir(self, base: Path, parts: list[str], create: bool) -> int:
        """An O_PATH-like fd of base/parts..., refusing symlinks at every step."""
        fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            for part in parts:
                if create:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o755, dir_fd=fd)
                        self._own(part, dir_fd=fd)
                try:
                    nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                except FileNotFoundError as e:
                    raise NotFound(f"{part}: no such directory in the sandbox") from e
                except (NotADirectoryError, OSError) as e:
                    raise InvalidArgument(
                        f"{part} is not a directory (or is a symlink) in the sandbox"
                    ) from e
                os.close(fd)
                fd = nxt
        except BaseException:
            os.close(fd)
            raise
        return fd

    # --- files ---

    async def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        await asyncio.to_thread(self._put_file, path, data, mode)

    def _put_file(self, path: str, data: bytes, mode: int) -> None:
        base, parts = self._locate(path)
        if not parts:
            raise InvalidArgument(f"{path} is a sandbox directory, not a file path")
        dfd = self._open_dir(base, parts[:-1], create=True)
        try:
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                st = os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    os.unlink(parts[-1], dir_fd=dfd)  # replace a link, never write through it
            fd = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode, dir_fd=dfd)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                os.fchmod(f.fileno(), mode)
                if self.uid is not None:
                    os.fchown(f.fileno(), self.uid, self.uid)
        finally:
            os.close(dfd)

    async def put_dir(self, local_dir: Path, dest: str) -> None:
        data = await asyncio.to_thread(archive.tar_of_dir, Path(local_dir))
        await asyncio.to_thread(self._put_tar, data, dest)

    def _put_tar(self, data: bytes, dest: str) -> None:
        base, parts = self._locate(dest)
        os.close(self._open_dir(base, parts, create=True))  # creates it, and checks no link on the way
        target = base.joinpath(*parts)
        names = archive.extract_tar(data, target)
        if self.uid is not None:
            for name in {n.split("/")[0] for n in names}:
                self._chown_tree(target / name)

    def _chown_tree(self, top: Path) -> None:
        self._own(top)
        if top.is_dir() and not top.is_symlink():
            for dirpath, dirnames, filenames in os.walk(top):
                for name in dirnames + filenames:
                    self._own(os.path.join(dirpath, name))

    async def get_file(self, path: str) -> bytes:
        return await asyncio.to_thread(self._get_file, path)

    def _get_file(self, path: str) -> bytes:
        with os.fdopen(self._open_file(path), "rb") as f:
            return f.read()

    async def read_ends(self, path: str, head: int, tail: int) -> FileEnds:
        return await asyncio.to_thread(self._read_ends, path, head, tail)

    def _read_ends(self, path: str, head: int, tail: int) -> FileEnds:
        fd = self._open_file(path)
        try:
            return file_ends.read_fd(fd, head, tail)
        finally:
            os.close(fd)

    def _open_file(self, path: str) -> int:
        """A read-only descriptor of the regular file at `path`, no link followed on the way."""
        base, parts = self._locate(path)
        if not parts:
            raise InvalidArgument(f"{path} is a directory")
        dfd = self._open_dir(base, parts[:-1], create=False)
        try:
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
        except FileNotFoundError as e:
            raise NotFound(f"{path}: no such file in the sandbox") from e
        except OSError as e:
            raise InvalidArgument(f"{path}: cannot read ({e.strerror}; symlinks are not followed)") from e
        finally:
            os.close(dfd)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise InvalidArgument(f"{path} is not a regular file")
        return fd

    async def get_tar(self, path: str) -> bytes:
        return await asyncio.to_thread(self._get_tar, path)

    def _get_tar(self, path: str) -> bytes:
        base, parts = self._locate(path)
        name = parts[-1] if parts else os.path.basename(sandbox_path(path)) or "root"
        os.close(self._open_dir(base, parts[:-1], create=False))
        target = base.joinpath(*parts)
        if not os.path.lexists(target):
            raise NotFound(f"{path}: nothing there in the sandbox")
        limit = self.backend.cfg.max_get_bytes
        buf = _BoundedBuffer(limit)
        try:
            with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
                tf.add(target, arcname=name, recursive=True)  # links are stored, not followed
        except _TooBig as e:
            raise InvalidArgument(f"{path}: the archive is larger than max_get_bytes={limit}") from e
        return buf.getvalue()

    # --- resetting and sealing (the verifier's clean context) ---

    async def reset_dir(self, path: str) -> None:
        await asyncio.to_thread(self._reset_dir, path)

    def _reset_dir(self, path: str) -> None:
        name, _ = writable_dir(self.spec, path)
        self._kill_processes()
        # Renamed away on the host, the old tree is gone from the sandbox whatever its modes or
        # links say; the new one is empty (nested mount points are made again by the next exec).
        current = self.dirs[name]
        old = current.with_name(f".{name}.old-{secrets.token_hex(4)}")
        os.rename(current, old)
        current.mkdir(mode=0o700)
        self._own(current)
        self.sealed.discard(name)
        shutil.rmtree(old, ignore_errors=True)  # what a non-root backend cannot delete goes at destroy

    async def seal_dir(self, path: str) -> None:
        await asyncio.to_thread(self._seal_dir, path)

    def _seal_dir(self, path: str) -> None:
        name, _ = writable_dir(self.spec, path)
        self.sealed.add(name)  # bound read-only from now on
        top = self.dirs[name]
        os.chmod(top, 0o755)
        if self.uid is not None:  # and no longer the sandbox uid's to chmod
            os.chown(top, 0, 0)
            for dirpath, dirnames, filenames in os.walk(top):
                for entry in dirnames + filenames:
                    os.chown(os.path.join(dirpath, entry), 0, 0, follow_symlinks=False)

    # --- running ---

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
        check_env(env or {}, "exec env")
        full_env = {**self.backend.base_env(self.spec, self.dirs), **self.spec.env, **(env or {})}
        left = self.deadline - time.monotonic()
        if left <= 0:
            return ExecResult(
                exit_code=137,
                stdout=b"",
                stderr=b"sandbox lifetime exceeded\n",
                duration_s=0.0,
                timed_out=True,
            )
        limit = left if timeout_s is None else min(timeout_s, left)
        r = self.spec.resources
        cpu_time = r.cpu_time_s or math.ceil(self.spec.timeout_s * max(1.0, r.cpus))
        prefix = rlimit_prefix(
            processes=r.processes, memory_mb=r.memory_mb, open_files=r.open_files, cpu_time_s=cpu_time
        )
        if self.cgroup is not None:
            prefix = self.cgroup.enter_argv() + prefix
        host_cwd, channel, relaying, env_fd = None, None, None, None
        # The launchers (cgroup join, prlimit, bwrap) run on the host with a fixed environment;
        # bwrap applies the sandbox's inside. Unisolated, the command itself runs on the host.
        launcher_env = LAUNCHER_ENV
        if self.backend.isolation == "bwrap":
            listen = None
            if self.spec.network == "proxy" and self.proxy is not None:
                assert self.backend.python is not None  # checked at create
                ours, channel = socket.socketpair()
                listen = Listen(self.backend.python, channel.fileno(), self.proxy[1])
                relaying = asyncio.ensure_future(relay.ProxyRelay(self.proxy, self.relay_cap).serve(ours))
            env_fd = env_args_fd(full_env)
            try:
                full = prefix + self._bwrap(argv, cwd, listen, env_fd)
            except BaseException:
                os.close(env_fd)
                raise
        else:
            base, parts = self._locate(cwd)
            host_cwd = str(base.joinpath(*parts))
            full, launcher_env = prefix + argv, full_env
        watch = _OomWatch(self.cgroup, r.memory_mb) if self.cgroup is not None else None
        task = asyncio.ensure_future(
            run_tree(
                full,
                env=launcher_env,
                timeout_s=limit,
                max_output_bytes=self.backend.cfg.max_output_bytes,
                stdin=stdin,
                cwd=host_cwd,
                user=self.uid if self.backend.isolation == "none" else None,
                pass_fds=[fd for fd in (channel and channel.fileno(), env_fd) if fd is not None],
                kill_group_after_exit=self.backend.isolation == "none",
                kill_extra=self._kill_processes,
                watch=watch.check if watch is not None else None,
            )
        )
        self._running.add(task)
        try:
            result = await task
        finally:
            self._running.discard(task)
            if channel is not None:
                channel.close()
            if env_fd is not None:
                os.close(env_fd)
            if relaying is not None:
                relaying.cancel()
                await asyncio.gather(relaying, return_exceptions=True)
        if watch is not None and watch.reason is None and watch.check():
            # over the cap but quicker than the watch: what the OOM killer left did not end well
            result = stopped_by(result, watch.reason or "")
        return result

    def _bwrap(self, argv: list[str], cwd: str, listen: Listen | None, env_fd: int) -> list[str]:
        binds = [Bind(self.dirs[name], dest, name not in self.sealed) for name, dest in self.layout]
        binds += [Bind(p, str(p), False) for p in self.backend.ro_paths if p.exists()]
        self._make_mount_points(binds)
        identity = (self.storage / "passwd", self.storage / "group") if self.uid is not None else None
        return bwrap_argv(
            system=self.backend.system,
            binds=binds,
            cwd=cwd,
            argv=argv,
            uid=self.uid,
            identity=identity,
            listen=listen,
            env_fd=env_fd,
        )

    def _make_mount_points(self, binds: list[Bind]) -> None:
        # A bind nested in a writable dir (/root/.openclaw/workspace in HOME) needs its mount point
        # there; made by bwrap it would belong to root and lock the sandbox out of its own HOME.
        for bind in binds:
            with contextlib.suppress(InvalidArgument):
                base, parts = self._locate(bind.dest, strict=True)
                os.close(self._open_dir(base, parts, create=True))

    def _kill_processes(self) -> None:
        """Kills whatever runs in this sandbox's cgroup or as its own uid (reaches what escaped the
        process group)."""
        if self.cgroup is not None:
            self.cgroup.kill()
        if self.uid is not None:
            kill_uid(self.uid)

    async def destroy(self) -> None:
        if self._destroyed:
            return
        self._destroyed = True
        for task in list(self._running):
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)
        self._kill_processes()
        await asyncio.to_thread(self._remove_storage)
        if self._uid_lock is not None:
            os.close(self._uid_lock)
            self._uid_lock = None
        self.backend.forget(self.id)

    def _remove_storage(self) -> None:
        if self.cgroup is not None:
            self.cgroup.remove()
        tmpfs.unmount(self.storage / "fs")
        shutil.rmtree(self.storage, ignore_errors=True)


class _OomWatch:
    """Whether the OOM killer struck in the sandbox's cgroup since this exec started (latched)."""

    def __init__(self, cgroup: SandboxCgroup, memory_mb: int) -> None:
        self.cgroup, self.memory_mb = cgroup, memory_mb
        self.before, self.reason = cgroup.oom_kills(), None

    def check(self) -> str | None:
        if self.reason is None and self.cgroup.oom_kills() > self.before:
            self.reason = f"its processes together went over the memory cap of {self.memory_mb} MiB"
        return self.reason


class _TooBig(Exception):
    pass


class _BoundedBuffer:
    """A write-only file object for tarfile that stops at `limit` bytes."""

    def __init__(self, limit: int) -> None:
        self.limit, self.parts, self.size = limit, [], 0

    def write(self, data: bytes) -> int:
        self.size += len(data)
        if self.size > self.limit:
            raise _TooBig
        self.parts.append(bytes(data))
        return len(data)

    def tell(self) -> int:
        return self.size

    def getvalue(self) -> bytes:
        return b"".join(self.parts)
