"""A deterministic scripted engine: answers each call with a chosen token sequence.

Owns the `Engine` stand-in for tests and benchmarks that are about the protocol, the proxy or a
harness rather than the policy (STYLE.md 16). Call i (counting from 0) gets `script[i]`, the last
entry repeating once the script runs out, or whatever a script function returns for the prompt.
`from_texts` tokenizes chosen texts through the real tokenizer and appends the end-of-turn token,
so a harness receives exactly what a policy emitting those tokens would produce. It honours the
`Engine` contract: InvalidArgument for bad prompts, Unavailable while `available` is False,
`max_new_tokens` (finish "length"), `stop_token_ids` (finish "stop" after the stop token), and
closing the stream aborts it. It knows nothing about chat templates.
"""

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence

import numpy as np

from clawgym.errors import InvalidArgument, Unavailable
from clawgym.inference.interface import EngineStatus, PromptIds, SamplingParams, TokenChunk
from clawgym.inference.validation import check_sampling

Script = Callable[[list[int], int], Sequence[int]]  # (prompt ids, call index) → output ids


def scripted_logprob(token_id: int, position: int) -> float:
    """A deterministic, recognisable logprob per generated token (always < 0)."""
    return -0.01 * (1 + (token_id + position) % 97)


class ScriptedEngine:
    """Emits scripted token sequences; records every prompt (and its sampling parameters) it accepted."""

    def __init__(
        self,
        script: Sequence[Sequence[int]] | Script,
        *,
        vocab_size: int,
        max_context: int = 4096,
        model: str = "scripted",
        policy_version: int = 0,
        chunk_tokens: int = 1,
        token_delay_s: float = 0.0,
    ) -> None:
        self._script = script
        self.vocab_size = vocab_size
        self.max_context = max_context
        self.model = model
        self.policy_version = policy_version
        self.chunk_tokens = max(1, chunk_tokens)
        self.token_delay_s = token_delay_s
        self.available = True
        self.prompts: list[np.ndarray] = []  # each accepted call's prompt ids
        self.params: list[SamplingParams] = []  # the sampling parameters of each accepted call
        self.aborted = 0  # streams closed before their last chunk
        self.running = 0

    @classmethod
    def from_texts(
        cls, tokenizer, texts: Sequence[str], *, end_token: str | None = "<|im_end|>", **kwargs
    ) -> "ScriptedEngine":
        """Call i answers texts[i] (the last repeating), tokenized as the policy would emit it."""
        end = [] if end_token is None else [tokenizer.convert_tokens_to_ids(end_token)]
        outputs = [list(tokenizer.encode(t, add_special_tokens=False)) + end for t in texts]
        kwargs.setdefault("vocab_size", len(tokenizer))
        return cls(outputs, **kwargs)

    def _output(self, prompt: np.ndarray, index: int) -> list[int]:
        if callable(self._script):
            return list(self._script(prompt.tolist(), index))
        if not self._script:
            return []
        return list(self._script[min(index, len(self._script) - 1)])

    def generate(
        self, prompt_ids: PromptIds, params: SamplingParams, request_id: str = ""
    ) -> AsyncIterator[TokenChunk]:
        if not self.available:
            raise Unavailable("scripted engine is marked unavailable")
        ids = np.asarray(prompt_ids)  # no copy of the proxy's int32 array
        if not len(ids):
            raise InvalidArgument("empty prompt")
        if ids.min() < 0 or ids.max() >= self.vocab_size:
            raise InvalidArgument(f"prompt has token ids outside [0, {self.vocab_size})")
        if len(prompt_ids) + params.max_new_tokens > self.max_context:
            raise InvalidArgument(
                f"prompt ({len(prompt_ids)}) + max_new_tokens ({params.max_new_tokens}) exceeds the "
                f"context ({self.max_context})"
            )
        check_sampling(params)  # the shared rule, so proxy tests see the refusals real engines give
        index = len(self.prompts)
        self.prompts.append(ids)
        self.params.append(params)
        output = self._output(ids, index)
        return self._stream(output, params, len(prompt_ids))

    async def _stream(
        self, output: list[int], params: SamplingParams, prompt_len: int
    ) -> AsyncIterator[TokenChunk]:
        budget = params.max_new_tokens or (self.max_context - prompt_len)
        stops = set(params.stop_token_ids)
        emitted, finished = 0, False
        self.running += 1
        try:
            while not finished:
                ids: list[int] = []
                finish = None
                while len(ids) < self.chunk_tokens:
                    if emitted >= len(output):
                        finish = "stop"  # the script ran out: as if the model stopped
                        break
                    if emitted >= budget:
                        finish = "length"
                        break
                    token = output[emitted]
                    ids.append(token)
                    emitted += 1
                    if token in stops:
                        finish = "stop"
                        break
                if finish is None and emitted >= budget:
                    finish = "length"
                if self.token_delay_s:
                    await asyncio.sleep(self.token_delay_s * max(1, len(ids)))
                else:
                    await asyncio.sleep(0)  # let other calls run, as a real engine would
                start = emitted - len(ids)
                logprobs = [scripted_logprob(t, start + i) for i, t in enumerate(ids)]
                finished = finish is not None
                yield TokenChunk(ids, logprobs, [self.policy_version] * len(ids), finish)  # type: ignore[arg-type]
        except (GeneratorExit, asyncio.CancelledError):
            self.aborted += 1
            raise
        finally:
            self.running -= 1

    async def load_weights(self, version: int, uri: str) -> float:
        self.policy_version = version
        return 0.0

    async def status(self) -> EngineStatus:
        return EngineStatus(
            model=self.model,
            policy_version=self.policy_version,
            max_context=self.max_context,
            vocab_size=self.vocab_size,
            running=self.running,
            ready=self.available,
        )

    async def aclose(self) -> None:
        """Nothing to release: a script holds no thread, channel or memory of its own."""
