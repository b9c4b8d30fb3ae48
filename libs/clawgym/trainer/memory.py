"""Handing the memory an update freed back to the OS, so the rollouts between updates can use it.

An update allocates and frees gigabytes of activations; glibc keeps what is freed inside its heap for
reuse, and an embedded run (engine and trainer in one process) then holds it through the rollouts.
`malloc_trim(0)` gives back every free page once per step (measured on SmolLM2-135M: resident memory
after an update 4.3 GB without it, 2.0 GB with it, the update's time unchanged). Not glibc: nothing.
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


def return_free_memory() -> bool:
    """Returns the heap's free pages to the OS; True if any were (False off glibc)."""
    libc = _libc()
    return bool(libc is not None and libc.malloc_trim(0))
