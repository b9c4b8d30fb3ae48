"""A local sandbox's disk cap: its storage (`<root>/<id>/fs`) is a tmpfs of that size.

Every writable sandbox path lives in that one directory, so the cap counts them together and a
write past it fails with ENOSPC, whoever writes. Mounting needs root (CAP_SYS_ADMIN here); `probe`
says whether it works. tmpfs is memory: what a sandbox writes is charged to its cgroup and so also
counts against its memory cap (like a memory-backed emptyDir on Kubernetes); what this process puts
in (task files) is charged to this process.
"""

import ctypes
import ctypes.util
import os
import tempfile
from pathlib import Path

_MNT_DETACH = 2
_MS_NOSUID, _MS_NODEV = 2, 4
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def mount(path: Path, size_bytes: int, mode: int = 0o711) -> None:
    """Mounts a tmpfs of `size_bytes` on the directory `path`; OSError if it cannot."""
    options = f"size={size_bytes},mode={mode:o}".encode()
    flags = _MS_NOSUID | _MS_NODEV
    if _libc.mount(b"tmpfs", str(path).encode(), b"tmpfs", flags, options) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount tmpfs on {path}: {os.strerror(err)}")


def unmount(path: Path) -> None:
    """Detaches the tmpfs on `path` if one is mounted there (its memory goes with the last user)."""
    if os.path.ismount(path):
        _libc.umount2(str(path).encode(), _MNT_DETACH)


def probe(root: Path) -> str | None:
    """None if tmpfs mounts work under `root`; else why not."""
    try:
        where = Path(tempfile.mkdtemp(prefix=".tmpfs-probe-", dir=root))
    except OSError as e:
        return f"cannot make a probe directory in {root}: {e}"
    try:
        mount(where, 1 << 20)
        unmount(where)
        return None
    except OSError as e:
        return str(e)
    finally:
        os.rmdir(where)
