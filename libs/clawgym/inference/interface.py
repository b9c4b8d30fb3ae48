"""The engine interface: what the proxy and the trainer's checks need from an inference engine.

The engine knows nothing about chat templates or tokenization: it is purely token id sequences.
Implemented by the torch engine (CPU, embedded), the vLLM engine (GPU), the gRPC client of the
inference service, and a scripted engine for protocol tests.

Logprob convention: each returned logprob is log p(token) under the distribution the token was
actually sampled from, i.e. after temperature scaling (and before top-p/top-k truncation, which
only restricts the support). Greedy (temperature 0) reports the temperature-1 logprob. This is
what the trainer's importance ratios compare against: the trainer computes log softmax(z / T).
"""

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np

FinishReason = Literal["stop", "length", "abort"]
# A prompt's token ids: the proxy hands engines an int32 array (a 30k-token prompt converted to a
# list and back costs ~2 ms a call), tests and the trainer's checks often a list.
PromptIds = Sequence[int] | np.ndarray


def id_list(ids: PromptIds) -> list[int]:
    """`ids` as a list of Python ints (an array's `tolist`, not a loop over numpy scalars)."""
    return ids.tolist() if isinstance(ids, np.ndarray) else [int(t) for t in ids]


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 0          # 0: up to the end of the context
    temperature: float = 1.0         # 0: greedy
    top_p: float = 1.0               # 1: off
    top_k: int = 0                   # 0: off
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None


@dataclass(frozen=True)
class TokenChunk:
    """New tokens since the previous chunk. `finish_reason` is set on the last chunk only."""

    token_ids: list[int]
    logprobs: list[float]
    policy_versions: list[int]
    finish_reason: FinishReason | None = None


@dataclass(frozen=True)
class EngineStatus:
    model: str
    policy_version: int
    max_context: int
    vocab_size: int
    running: int = 0
    waiting: int = 0
    ready: bool = True
    extra: dict[str, float] = field(default_factory=dict)


class Engine(Protocol):
    def generate(
        self, prompt_ids: PromptIds, params: SamplingParams, request_id: str = ""
    ) -> AsyncIterator[TokenChunk]:
        """Streams chunks as tokens are produced; closing the iterator aborts the request.

        Raises InvalidArgument (empty prompt, id outside the vocabulary, prompt + max_new_tokens
        beyond the context) before yielding anything, Unavailable while the engine cannot serve.
        """
        ...

    async def load_weights(self, version: int, uri: str) -> float:
        """Swaps in the checkpoint at `uri` as `version` between decode steps; returns seconds taken.

        In-flight requests continue; their later tokens carry the new version. A checkpoint that
        does not fit the model raises FailedPrecondition and the old weights keep serving.
        """
        ...

    async def status(self) -> EngineStatus: ...

    async def aclose(self) -> None:
        """Releases what the engine holds (its decode thread, channels, accelerator memory); requests
        still running end. Called once, by whoever built the engine."""
        ...
