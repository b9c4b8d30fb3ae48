"""Handing the memory an update freed back to the OS, so the rollouts between updates can use it.

An update allocates and frees gigabytes of activations; glibc keeps what is freed inside its heap for
reuse, and an embedded run (engine and trainer in one process) then holds it through the rollouts.
`malloc_trim(0)` gives back every free page once per step (measured on SmolLM2-135M: resident memory
after an update 4.3 GB without it, 2.0 GB with it, the update's time unchanged).

Between two trims the heap still grows: glibc raises its mmap threshold to the size of each large
block freed (up to 32 MB), so activations, KV-cache re-lays and reloaded weights are then carved
from the heap, where a freed block that is not at its top stays resident and the next large block
can seldom reuse it. `unpool_large_blocks` fixes the threshold, so every block from that size up is
its own mapping, handed back to the OS when freed (bench/update_memory.py measures what it saves
and costs). Not glibc: nothing.
"""

import ctypes
import ctypes.util
import functools


@functools.cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)


def unpool_large_blocks(threshold_mb: float) -> bool:
    """Serves every allocation of `threshold_mb` or more from its own mapping, process-wide (0: leaves
    glibc's dynamic threshold); True if set."""
    libc = _libc()
    if libc is None or threshold_mb <= 0:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, int(threshold_mb * 2**20)))


def return_free_memory() -> bool:
    """Returns the heap's free pages to the OS; True if any were (False off glibc)."""
    libc = _libc()
    return bool(libc is not None and libc.malloc_trim(0))
