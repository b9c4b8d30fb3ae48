"""How a local sandbox is isolated: the bubblewrap command line, the sandbox's uid, and the probe.

The sandbox's filesystem is a fresh tmpfs root holding: the host's system directories read-only
(`system_paths`; `/root`, `/home`, `/tmp`, `/run` and everything else are simply absent), the
extra read-only host paths (`ro_paths`, e.g. installed harness CLIs), a new `/proc` and a minimal
`/dev`, and the sandbox's own writable directories (workspace, HOME, `/tmp`, task mounts), each
bound from the sandbox's storage. It gets new PID, IPC, UTS and cgroup namespaces, and a new network
namespace with only loopback in it, whatever `network` says: with `network="proxy"` the command is
preceded by `relay.LISTEN`, which binds the proxy's in-sandbox address there and hands it to the
backend's relay (see `relay`), so the proxy is the one address outside it can reach.

Environment. bwrap (and the cgroup join and `prlimit` before it) runs on the host with the fixed
`environment.LAUNCHER_ENV`; it reads the sandbox's environment from a file descriptor
(`env_args_fd`: `--clearenv`, then `--setenv` pairs) and applies it only to what it starts inside,
so nothing a task or harness sets reaches a host process, and no value is on a host command line.

Identity. Run as root, bubblewrap mounts with root's powers (so it can bind paths only root can
reach), then `setpriv` drops the command to the sandbox's own unprivileged uid with no
capabilities, no supplementary groups and no_new_privs. That uid is unique per live sandbox
(`UidPool`), so RLIMIT_NPROC counts only this sandbox's processes, and files of one sandbox are
unreadable to another even by path. A synthetic `/etc/passwd` names it `sandbox` with HOME as its
home. Run as a normal user, bubblewrap uses an unprivileged user namespace and the command keeps
that user's uid (limits then count all of that user's processes).
"""

import fcntl
import os
import random
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from clawgym.sandbox.interface import SandboxFailed
from clawgym.sandbox.relay import LISTEN

SANDBOX_USER = "sandbox"


@dataclass(frozen=True)
class Bind:
    source: Path  # host directory
    dest: str  # sandbox path
    writable: bool


class UidPool:
    """Hands out uids from [base, base+count), one per live sandbox, across processes (flock)."""

    def __init__(self, lock_dir: Path, base: int, count: int) -> None:
        self.lock_dir, self.base, self.count = lock_dir, base, count
        lock_dir.mkdir(parents=True, exist_ok=True, mode=0o700)

    def acquire(self) -> tuple[int, int]:
        """(uid, lock fd): the uid is ours until the fd is closed (or this process dies)."""
        start = random.randrange(self.count)
        for i in range(self.count):
            uid = self.base + (start + i) % self.count
            fd = os.open(self.lock_dir / str(uid), os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            return uid, fd
        raise SandboxFailed(f"all {self.count} sandbox uids from {self.base} are in use")


def kill_uid(uid: int) -> int:
    """SIGKILLs every process whose real uid is `uid` (a sandbox's own uid); returns how many."""
    killed = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status") as f:
                real_uid = next(int(line.split()[1]) for line in f if line.startswith("Uid:"))
            if real_uid == uid:
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
        except (OSError, StopIteration, ValueError):
            continue  # gone meanwhile, or not ours to read
    return killed


def uid_is_free(lock_dir: Path, uid: int) -> bool:
    """True when no live sandbox holds `uid` (its pool lock can be taken), so killing it is safe."""
    try:
        fd = os.open(lock_dir / str(uid), os.O_CREAT | os.O_RDWR, 0o600)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def system_binds(paths: list[str]) -> list[str]:
    """bwrap arguments that show each host path read-only at the same place (links as links)."""
    args: list[str] = []
    for path in paths:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


def identity_files(storage: Path, uid: int, home: str) -> tuple[Path, Path]:
    """Writes the passwd and group files the sandbox sees; returns their host paths."""
    passwd, group = storage / "passwd", storage / "group"
    passwd.write_text(
        f"root:x:0:0:root:/nonexistent:/usr/sbin/nologin\n{SANDBOX_USER}:x:{uid}:{uid}::{home}:/bin/sh\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    )
    group.write_text(f"root:x:0:\n{SANDBOX_USER}:x:{uid}:\nnogroup:x:65534:\n")
    return passwd, group


@dataclass(frozen=True)
class Listen:
    """Run `relay.LISTEN` first: bind 127.0.0.1:`port` in the sandbox, send it over fd `channel`."""

    python: str  # a Python the sandbox sees (`sandbox_python`)
    channel: int  # inherited unix socket
    port: int


def bwrap_argv(
    *,
    system: list[str],
    binds: list[Bind],
    cwd: str,
    argv: list[str],
    uid: int | None,
    identity: tuple[Path, Path] | None,
    listen: Listen | None = None,
    env_fd: int | None = None,
) -> list[str]:
    """The full command line: bwrap, then the proxy's listener (`listen`), then (as root) setpriv
    down to `uid`, then `argv`. `env_fd` (`env_args_fd`) holds the sandbox's environment: bwrap
    itself runs with the launcher's fixed one and sets the sandbox's only for what it starts."""
    args = ["bwrap"]
    if env_fd is not None:
        args += ["--args", str(env_fd)]
    args += [
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--unshare-net",
    ]
    args += ["--die-with-parent", "--new-session", "--hostname", "sandbox", "--tmpfs", "/", *system]
    if identity is not None:
        args += ["--ro-bind", str(identity[0]), "/etc/passwd", "--ro-bind", str(identity[1]), "/etc/group"]
    args += ["--proc", "/proc", "--dev", "/dev"]
    # parents before children, so a mount under HOME lands on top of HOME
    made = {"/"}
    for bind in sorted(binds, key=lambda b: (b.dest.count("/"), b.dest)):
        args += _parent_dirs(bind.dest, binds, system, made)
        args += ["--bind" if bind.writable else "--ro-bind", str(bind.source), bind.dest]
    args += ["--chdir", cwd]
    first = []
    if listen is not None:
        first = [listen.python, "-I", "-S", "-c", LISTEN, str(listen.channel), str(listen.port)]
    if uid is None:
        return [*args, "--", *first, *argv]
    drop = [
        "setpriv",
        f"--reuid={uid}",
        f"--regid={uid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
    ]
    # NET_BIND_SERVICE: for the listener on a proxy port below 1024; setpriv drops it with the rest
    caps = "CAP_SETUID,CAP_SETGID,CAP_SETPCAP" + (",CAP_NET_BIND_SERVICE" if listen else "")
    return [*args, "--cap-add", caps, "--", *first, *drop, "--", *argv]


def env_args_fd(env: Mapping[str, str]) -> int:
    """A file descriptor holding bwrap `--args` that replace the environment with `env`.

    Read by bwrap, not passed on its command line: values (API keys) stay out of the argv that
    every local user can read in /proc. The caller passes it to the child and closes it after."""
    words = ["--clearenv"]
    for name, value in env.items():
        words += ["--setenv", name, value]
    fd = os.memfd_create("clawgym-sandbox-env", os.MFD_CLOEXEC)
    try:
        data = memoryview(b"".join(w.encode() + b"\0" for w in words))
        while data:
            data = data[os.write(fd, data) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def sandbox_python(system_paths: list[str]) -> str | None:
    """A Python 3 that sandboxes see at the same path (this one's, else the system's), or None."""
    roots = [p.rstrip("/") + "/" for p in system_paths if os.path.isdir(p) and not os.path.islink(p)]
    for candidate in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        real = os.path.realpath(candidate)
        if os.access(real, os.X_OK) and any(real.startswith(r) for r in roots):
            return real
    return None


def _parent_dirs(dest: str, binds: list[Bind], system: list[str], made: set[str]) -> list[str]:
    """`--dir`s for the parents of `dest` on the tmpfs root (bwrap would make them 0700 root)."""
    covered = {b.dest for b in binds} | {arg for arg in system if arg.startswith("/")}  # the system's paths
    args: list[str] = []
    parts = dest.strip("/").split("/")[:-1]
    for i in range(1, len(parts) + 1):
        parent = "/" + "/".join(parts[:i])
        if parent in covered or any(parent.startswith(c.rstrip("/") + "/") for c in covered):
            break  # inside a bind (or the system): its own directories already exist
        if parent not in made:
            made.add(parent)
            args += ["--perms", "0755", "--dir", parent]
    return args


def rlimit_prefix(*, processes: int, memory_mb: int, open_files: int, cpu_time_s: int) -> list[str]:
    """`prlimit` arguments for one sandbox (they hold for bwrap and everything it starts)."""
    mem = memory_mb << 20
    return [
        "prlimit",
        f"--nproc={processes}:{processes}",
        f"--data={mem}:{mem}",
        f"--nofile={open_files}:{open_files}",
        f"--cpu={cpu_time_s}:{cpu_time_s + 5}",
        "--core=0:0",
        "--",
    ]


def probe_bwrap(as_root: bool, system: list[str]) -> str | None:
    """None if bubblewrap can run a command here the way we use it; else why not."""
    if shutil.which("bwrap") is None:
        return "bwrap is not installed (Debian: apt-get install bubblewrap)"
    if shutil.which("prlimit") is None or (as_root and shutil.which("setpriv") is None):
        return "prlimit/setpriv (util-linux) are missing"
    argv = bwrap_argv(
        system=system,
        binds=[],
        cwd="/",
        argv=["true"],
        uid=65534 if as_root else None,
        identity=None,
    )
    try:
        done = subprocess.run(argv, capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bwrap failed to start: {e}"
    if done.returncode != 0:
        return f"bwrap cannot create a sandbox here: {done.stderr.decode(errors='replace').strip()}"
    return None
