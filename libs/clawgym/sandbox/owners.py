"""Who owns a sandbox and whether that owner still lives: what `reap` may delete.

A backend object is one *instance* of its *owner*. The owner is `sandbox.owner`, else the host
name: stable across restarts, it is what `reap` selects on. The instance (`<pid>-<random>`) is
unique per backend object; both label every sandbox. Processes may share an owner (two `serve
orchestrator` on one host keep the default), so another instance's sandbox is garbage only once
that instance is gone (`Ownership.reapable`), never while it lives, whoever asks.

Liveness of the local and docker backends (`InstanceLocks`): an instance holds an exclusive
`flock` on its own file, `<folder>/<owner>/<instance>`, in a folder this machine's processes share
(local: `<root_dir>/.owners`; docker: `<state_dir>/owners`) for as long as it lives. The kernel
drops the lock when the process ends, however it ends (kill -9 included): a restarted
orchestrator finds its predecessor's lock free and reaps what it left at once, while a live peer's
lock is held. An instance with no file (another machine's or folder's) is `unknown`: kept.

The kubernetes backend's instances renew Leases (`k8s_leases`), which tell a death only once they
run out; there a configured owner, which one live process holds at a time (`Ownership.pinned`: the
chart's pod name, as the store's lease assumes too), takes its predecessors' pods at start.

Not here: listing and deleting sandboxes (each backend's `reap`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import socket
from pathlib import Path
from typing import Literal

from clawgym.sandbox.interface import label_value

Liveness = Literal["live", "dead", "unknown"]


class Ownership:
    """The owner and instance of one backend object, and its name in the store's leases."""

    def __init__(self, configured: str) -> None:
        self.owner = label_value(configured or socket.gethostname())
        self.instance = f"{os.getpid()}-{secrets.token_hex(6)}"
        # The store takes a lost orchestrator's rollouts at once when one of the same name starts
        # (`Orchestrator.start`): right for a configured owner, which one process holds at a time
        # (the chart's pod name), wrong for the host name, which every process on the host shares.
        self.pinned = bool(configured)  # one live process at a time holds it (the contract above)
        self.lease_name = self.owner if self.pinned else f"{self.owner}.{self.instance}"

    def reapable(self, instance: str, liveness: Liveness) -> bool:
        """Whether `reap` may delete a sandbox of its owner it does not hold, made by `instance`
        ("": made before instances were labelled) whose liveness is `liveness`."""
        return not instance or instance == self.instance or liveness == "dead"


class InstanceLocks:
    """Liveness records of instances in a folder, `<folder>/<owner>/<instance>`, each held by its
    instance's `flock` (module docstring)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._held: dict[tuple[str, str], int] = {}

    def hold(self, owner: str, instance: str) -> None:
        """Records `instance` of `owner` as live for as long as this process lives (or `release`)."""
        (self.folder / owner).mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.folder / owner / instance, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._held[owner, instance] = fd

    def liveness(self, owner: str, instance: str) -> Liveness:
        if (owner, instance) in self._held:
            return "live"
        fd = self._open(owner, instance)
        if fd is None:
            return "unknown"
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return "live"  # its process holds it (or another reaper is looking right now)
        finally:
            os.close(fd)  # a lock taken here goes with the descriptor
        return "dead"

    def dead(self, owner: str) -> list[str]:
        """The recorded instances of `owner` that are gone."""
        try:
            names = sorted(os.listdir(self.folder / owner))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [name for name in names if self.liveness(owner, name) == "dead"]

    def forget(self, owner: str, instance: str) -> None:
        """Removes a dead instance's record (once its sandboxes are gone); a live one's stays."""
        fd = self._open(owner, instance)
        if fd is None:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.folder / owner / instance)
        except BlockingIOError:
            pass
        finally:
            os.close(fd)

    def release(self) -> None:
        """Lets this process's instances go, as its end would: a later reap of their owner takes
        what they left, then their records."""
        for fd in self._held.values():
            os.close(fd)
        self._held.clear()

    def _open(self, owner: str, instance: str) -> int | None:
        if any("/" in part or part in ("", ".", "..") for part in (owner, instance)):
            return None  # label values read from sandboxes: never a path of their own
        try:
            return os.open(self.folder / owner / instance, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:  # none, or not a plain file (a link is never followed)
            return None
