"""Per-sandbox memory and process caps through a cgroup (v2, or v1's memory and pids controllers).

Each local sandbox gets one cgroup (v1: one in each of the memory and pids hierarchies) below the
one this process runs in, so whatever limits this process has still hold above it. Every exec
joins it before it starts bubblewrap (`enter_argv`), so the caps count all of the sandbox's
processes together, whatever their uid: memory.max / memory.limit_in_bytes (swap included where
the kernel accounts it) and pids.max. The kernel's OOM killer then acts inside the sandbox only;
`oom_kills` lets the backend notice and stop the whole exec.

Where this process cannot make such cgroups (not root; a v2 hierarchy whose own cgroup does not
delegate memory and pids), `probe` says why and the backend falls back to rlimits.
"""

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PREFIX = "clawgym-"  # every sandbox cgroup's name starts so (`reap` finds leftovers by it)


@dataclass(frozen=True)
class Cgroups:
    """Where sandbox cgroups are made: v2 one parent directory, v1 the memory and pids parents."""

    version: int
    parents: tuple[Path, ...]  # v2: (parent,); v1: (memory parent, pids parent)

    def make(self, name: str, *, memory_bytes: int, pids: int) -> "SandboxCgroup":
        dirs = tuple(parent / f"{PREFIX}{name}" for parent in self.parents)
        group = SandboxCgroup(self.version, dirs)
        try:
            for d in dirs:
                d.mkdir(exist_ok=True)
            if self.version == 2:
                (d2 := dirs[0]).joinpath("memory.max").write_text(str(memory_bytes))
                _try_write(d2 / "memory.swap.max", "0")
                _try_write(d2 / "memory.oom.group", "1")  # one OOM kill takes the whole exec down
                d2.joinpath("pids.max").write_text(str(pids))
            else:
                memory, pid_dir = dirs
                memory.joinpath("memory.limit_in_bytes").write_text(str(memory_bytes))
                _try_write(memory / "memory.memsw.limit_in_bytes", str(memory_bytes))  # no swap
                pid_dir.joinpath("pids.max").write_text(str(pids))
        except BaseException:
            group.remove()
            raise
        return group

    def leftovers(self, name: str) -> "SandboxCgroup":
        """The cgroup a sandbox called `name` would have (for `reap`; it may not exist)."""
        return SandboxCgroup(self.version, tuple(p / f"{PREFIX}{name}" for p in self.parents))


@dataclass(frozen=True)
class SandboxCgroup:
    version: int
    dirs: tuple[Path, ...]

    def enter_argv(self) -> list[str]:
        """A prefix that moves the exec into this cgroup, then execs the rest of the command line
        (a shell: a preexec hook is unsafe in a threaded process)."""
        joins = " && ".join(f'echo $$ > "${i + 1}"' for i in range(len(self.dirs)))
        script = f'{joins} || exit 126; shift {len(self.dirs)}; exec "$@"'
        return ["/bin/sh", "-c", script, "sh", *(str(d / "cgroup.procs") for d in self.dirs)]

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer has killed in this cgroup so far."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            for line in (self.dirs[0] / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def kill(self) -> None:
        """SIGKILLs every process in the cgroup (v2: at once, through cgroup.kill where it exists)."""
        if self.version == 2 and _try_write(self.dirs[0] / "cgroup.kill", "1"):
            return
        for d in self.dirs:
            with contextlib.suppress(OSError):
                for pid in (d / "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError, ValueError):
                        os.kill(int(pid), signal.SIGKILL)

    def remove(self) -> None:
        """Kills what is left and deletes the cgroup (a cgroup goes only once it is empty)."""
        for d in self.dirs:
            deadline = time.monotonic() + 5.0
            while d.exists():
                self.kill()
                try:
                    d.rmdir()
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break  # left for reap: a process stuck in the kernel
                    time.sleep(0.02)


def probe() -> Cgroups | str:
    """Where this process may make capped cgroups, or why it cannot."""
    try:
        own = _own_cgroups()
    except OSError as e:
        return f"cannot read /proc/self/cgroup: {e}"
    if (ROOT / "cgroup.controllers").exists():  # the unified (v2) hierarchy only
        parent = ROOT / own.get("", "/").lstrip("/")
        controllers = _read(parent / "cgroup.subtree_control").split()
        if not {"memory", "pids"} <= set(controllers):
            # only possible here where no process sits in `parent` itself (the root cgroup)
            _try_write(parent / "cgroup.subtree_control", "+memory +pids")
            controllers = _read(parent / "cgroup.subtree_control").split()
        if not {"memory", "pids"} <= set(controllers):
            return f"cgroup v2: {parent} does not delegate the memory and pids controllers"
        found: Cgroups | str = Cgroups(2, (parent,))
    else:
        parents = []
        for controller in ("memory", "pids"):
            mount = ROOT / controller
            if controller not in own or not (mount / "cgroup.procs").exists():
                return f"cgroup v1: no {controller} controller mounted at {mount}"
            parents.append(mount / own[controller].lstrip("/"))
        found = Cgroups(1, tuple(parents))
    for parent in found.parents:
        if not os.access(parent, os.W_OK):
            return f"cgroup v{found.version}: {parent} is not writable by this process"
    return found


def _own_cgroups() -> dict[str, str]:
    """controller -> this process's cgroup path ("" is the v2 hierarchy's)."""
    own: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(","):
            own[controller] = path
    return own


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _try_write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
        return True
    except OSError:
        return False
