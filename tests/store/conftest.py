"""Fixtures of the store tests: a fresh `SqlStore` per backend and a factory of recognisable calls."""

from collections.abc import Callable, Iterator

import numpy as np
import pytest

from clawgym.records import Call
from clawgym.store.bus_memory import MemoryBus
from clawgym.store.sql import SqlStore


def call_arrays(key: int, n_prompt: int, n_output: int) -> dict[str, np.ndarray]:
    """Deterministic token arrays for `key`: regenerate them to check what the store gave back."""
    rng = np.random.default_rng(key)
    return {
        "prompt_ids": rng.integers(0, 151_000, n_prompt, dtype=np.int32),
        "output_ids": rng.integers(0, 151_000, n_output, dtype=np.int32),
        "output_logprobs": -rng.exponential(1.0, n_output).astype(np.float32),
        "output_versions": np.full(n_output, key % 7, dtype=np.int32),
    }


@pytest.fixture
def make_call() -> Callable[..., Call]:
    """make_call(rollout_id, seq, key=…, n_prompt=…, n_output=…, **overrides) → a valid Call."""

    def make(
        rollout_id: str, seq: int, key: int = 0, n_prompt: int = 50, n_output: int = 8, **overrides
    ) -> Call:
        fields = {
            "rollout_id": rollout_id,
            "seq": seq,
            "protocol": "anthropic_messages",
            "request": {"model": "policy", "messages": [{"role": "user", "content": f"call {seq}"}]},
            "response": {"content": [{"type": "text", "text": "ok"}]},
            **call_arrays(key, n_prompt, n_output),
            "policy_version": key % 7,
            "finish_reason": "stop",
            "latency_s": 0.25,
            "headers": {"x-session": "s1"},
            "temperature": (None, 0.0, 0.7, 1.0)[key % 4],  # None: not recorded (older calls)
        }
        return Call(**(fields | overrides))

    return make


@pytest.fixture
def store(store_url: str) -> Iterator[SqlStore]:
    """A SqlStore on a fresh database of each backend, with an in-process bus."""
    s = SqlStore(store_url, MemoryBus())
    yield s
    s.close()


@pytest.fixture
def expected_arrays() -> Callable[[int, int, int], dict[str, np.ndarray]]:
    """call_arrays(key, n_prompt, n_output): the arrays `make_call` put into a call with that key."""
    return call_arrays
