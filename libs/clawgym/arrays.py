"""Packed little-endian token arrays: the one encoding of token ids and logprobs.

Token ids and per-token versions are int32, logprobs float32, always little-endian, in the store,
on the wire (gRPC `bytes`) and in caches. Never JSON lists: a 20k-token prompt is 80 kB packed.
"""

import numpy as np

IDS = np.dtype("<i4")
LOGPROBS = np.dtype("<f4")


class ArrayError(ValueError):
    """An array has the wrong dtype, shape or byte length."""


def pack_ids(ids: "np.ndarray | list[int]") -> bytes:
    """int32 LE bytes of a 1-D sequence of integer token ids."""
    arr = np.asarray(ids)
    if arr.ndim != 1:
        raise ArrayError(f"token ids must be 1-D, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ArrayError(f"token ids must be integers, got dtype {arr.dtype}")
    if arr.size and (arr.min() < np.iinfo(IDS).min or arr.max() > np.iinfo(IDS).max):
        raise ArrayError("token ids must fit in int32")
    return arr.astype(IDS, copy=False).tobytes()


def pack_logprobs(logprobs: "np.ndarray | list[float]") -> bytes:
    """float32 LE bytes of a 1-D sequence of logprobs."""
    arr = np.asarray(logprobs)
    if arr.ndim != 1:
        raise ArrayError(f"logprobs must be 1-D, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.floating):
        raise ArrayError(f"logprobs must be floats, got dtype {arr.dtype}")
    return arr.astype(LOGPROBS, copy=False).tobytes()


def unpack_ids(data: bytes) -> np.ndarray:
    """Read-only int32 view of packed ids."""
    if len(data) % IDS.itemsize:
        raise ArrayError(f"packed int32 array has {len(data)} bytes, not a multiple of 4")
    return np.frombuffer(data, dtype=IDS)


def unpack_logprobs(data: bytes) -> np.ndarray:
    """Read-only float32 view of packed logprobs."""
    if len(data) % LOGPROBS.itemsize:
        raise ArrayError(f"packed float32 array has {len(data)} bytes, not a multiple of 4")
    return np.frombuffer(data, dtype=LOGPROBS)
