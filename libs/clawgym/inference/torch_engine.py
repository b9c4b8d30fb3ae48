"""The torch engine: the `Engine` interface over an HF causal LM, served in-process with continuous batching.

Owns the async face: validating requests, streaming tokens to the caller's event loop, aborting
when the caller goes away, and hot-reloading checkpoints. The decode loop itself runs in a
thread (`clawgym.inference.batch_loop`), so the event loop stays free while the model computes.
It knows no chat template or tokenizer: token ids in, token ids + logprobs + versions out.

`weight_sync="shared"` (`inference.weight_sync`): a trainer in the same process hands its own
parameters over (`share_weights`) instead of a checkpoint to read, so one copy of the weights serves
both; while the trainer's optimizer changes them, `hold` parks the decode loop, and the next
`share_weights` (the committed version) resumes it. `weight_sync="copy"`: such a trainer hands them
over at each commit to be copied into the engine's own dtype (`push_weights`: float32 training,
bfloat16 serving), no file read and no parking.
"""

import asyncio
import time
from collections.abc import AsyncIterator
from copy import deepcopy
from pathlib import Path
from typing import Literal

import torch

from clawgym.errors import ClawgymError, FailedPrecondition, InvalidArgument, Unavailable
from clawgym.inference.batch_loop import BatchLoop, Request, StepCounters
from clawgym.inference.checkpoint import check_fits, fit_checkpoint, read_safetensors, weight_targets
from clawgym.inference.interface import EngineStatus, PromptIds, SamplingParams, TokenChunk, id_list
from clawgym.inference.sampler import make_generator
from clawgym.inference.validation import validate_request


class TorchEngine:
    """An `Engine` over one HF causal LM: continuous batching, exact sampled-token logprobs, hot reload."""

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        name: str,
        policy_version: int = 0,
        max_batch: int = 32,
        kv_cache_mb: float = 1024,
        prefill_chunk: int = 512,
        max_context: int | None = None,
        prefix_cache_tokens: int = 8192,
        shared_prefix_tokens: int = 256,
        prefill_batch: int = 32,
        pack_weights: bool | Literal["auto"] = "auto",
        pack_weights_mb: float = 0,
        weight_sync: Literal["files", "shared", "copy"] = "files",
    ) -> None:
        """`max_batch`: running rows; `kv_cache_mb`: the running batch's keys and values at most (a request
        waits for room rather than grow it; one that alone exceeds it is refused); `prefill_chunk`:
        prompt tokens computed per loop step in all, shared fairly between prompts (long prompts
        interleave with decode steps and newcomers; the bound is in `batch_loop`'s docstring);
        `prefix_cache_tokens`: prompt KV kept for reuse by later prompts with the same prefix (0 = off);
        `shared_prefix_tokens`: running rows whose prompts share at least this many first tokens keep
        one copy of their KV (`shared_prefix`; 0 = off);
        `prefill_batch`: prompts prefilled together in one forward at most (1 = one forward each);
        `pack_weights`: float32 CPU linear weights packed once for oneDNN (`packed_linear`); "auto":
        only the layers whose shape `packed_linear.layers_worth_packing` measures faster packed here,
        within `pack_weights_mb` of packed copies when it is > 0;
        `weight_sync`: "shared" lets a trainer in this process lend its weights (`share_weights`),
        "copy" hand them over to be copied (`push_weights`)."""
        config = model.config.get_text_config()
        self.name = name
        self.weight_sync = weight_sync
        self.model = model.eval()
        self.max_context = max_context or config.max_position_embeddings
        self.vocab_size = config.vocab_size
        self._targets, self._aliases = weight_targets(model)
        self._reloading = 0
        self._loop = BatchLoop(
            model,
            self._targets,
            max_context=self.max_context,
            max_batch=max_batch,
            kv_cache_mb=kv_cache_mb,
            prefill_chunk=prefill_chunk,
            policy_version=policy_version,
            prefix_cache_tokens=prefix_cache_tokens,
            shared_prefix_tokens=shared_prefix_tokens,
            prefill_batch=prefill_batch,
            pack_weights=pack_weights,
            pack_weights_mb=pack_weights_mb,
        )

    @classmethod
    def from_spec(
        cls,
        spec: str,
        *,
        dtype: torch.dtype = torch.float32,
        cache_dir: str | Path | None = None,
        device: str | torch.device = "cpu",
        **kwargs,
    ) -> "TorchEngine":
        """Loads the policy named by a model spec (`tiny-qwen3`, `smollm2-135m`, a local HF folder)
        onto `device`; the engine runs where its weights are (KV cache and forwards there, sampling
        on the CPU)."""
        from clawgym.policies import load_model

        model = load_model(spec, dtype=dtype, cache_dir=cache_dir, device=device)
        return cls(model, name=str(spec), **kwargs)

    # --- Engine interface -----------------------------------------------------------------------

    async def generate(
        self, prompt_ids: PromptIds, params: SamplingParams, request_id: str = ""
    ) -> AsyncIterator[TokenChunk]:
        """Streams the request's tokens; closing the iterator (or cancelling its task) aborts it."""
        prompt = id_list(prompt_ids)
        limit = validate_request(prompt, params, self.vocab_size, self.max_context)
        needs = self._loop.needs_slots(prompt, limit)
        if needs > self._loop.max_slots:
            mb = needs * self._loop.slot_bytes / 2**20
            raise InvalidArgument(
                f"prompt ({len(prompt)} tokens) + up to {limit} new tokens need {mb:.0f} MB of KV cache, "
                f"beyond the engine's budget (inference.kv_cache_mb {self._loop.max_slots * self._loop.slot_bytes / 2**20:.0f}): "
                "ask for fewer new tokens or raise it"
            )
        request = Request(
            id=request_id,
            prompt=prompt,
            params=params,
            limit=limit,
            loop=asyncio.get_running_loop(),
            queue=asyncio.Queue(),
            generator=make_generator(params.seed),
        )
        if not self._loop.submit(request):
            raise Unavailable("the torch engine is closed")
        finished = False
        try:
            while not finished:
                items = [await request.queue.get()]
                while not request.queue.empty():
                    items.append(request.queue.get_nowait())
                chunk, finished, error = _chunk(items)
                if chunk is not None:
                    yield chunk
                if error is not None:
                    raise error
        finally:
            if not finished:
                self._loop.abort(request)

    async def load_weights(self, version: int, uri: str) -> float:
        """Reads and checks the checkpoint off the event loop, then swaps it in between two decode steps."""
        started = time.perf_counter()
        self._reloading += 1
        try:
            tensors, packed = await asyncio.to_thread(self._read_fitting, str(uri))
            swap = self._loop.swap(version, tensors, started, packed)
            await asyncio.to_thread(swap.done.wait)
        finally:
            self._reloading -= 1
        if not swap.applied:
            raise Unavailable("the torch engine closed before the new weights were swapped in")
        return swap.seconds

    async def share_weights(self, version: int, tensors: dict[str, torch.Tensor]) -> float:
        """`weight_sync="shared"`: serves `version` computed with the caller's own tensors (by checkpoint
        name; no copy is made: they must already be in the engine's dtype and device), repacking what
        the loop packs; ends a `hold`. The caller changes them only inside a `hold`."""
        if self.weight_sync != "shared":
            raise FailedPrecondition(
                f"share_weights needs inference.weight_sync=shared, not {self.weight_sync}"
            )
        started = time.perf_counter()
        fitted = fit_checkpoint(
            tensors, self._targets, self._aliases, f"shared weights v{version}", copy=False
        )
        copied = sorted(n for n, t in fitted.items() if t.data_ptr() != tensors[n].data_ptr())
        if copied:
            t = self._targets[copied[0]]
            raise FailedPrecondition(
                f"shared weights v{version}: {len(copied)} tensors ({copied[0]}, …) are not in the engine's "
                f"{t.dtype} on {t.device}: sharing would copy them; use inference.weight_sync files"
            )
        return await self._swap_in(version, fitted, started, "the shared weights", release=True)

    async def push_weights(self, version: int, tensors: dict[str, torch.Tensor]) -> float:
        """`weight_sync="copy"`: serves `version` with the caller's tensors (by checkpoint name) copied
        into the engine's own, in its dtype, between two decode steps (no second set of weights is
        made). The caller leaves them unchanged until this returns."""
        if self.weight_sync != "copy":
            raise FailedPrecondition(f"push_weights needs inference.weight_sync=copy, not {self.weight_sync}")
        started = time.perf_counter()
        check_fits(tensors, self._targets, self._aliases, f"pushed weights v{version}")
        sources = {name: tensors[name] for name in self._targets}
        return await self._swap_in(version, sources, started, "the pushed weights", copy_in=True)

    async def _swap_in(
        self, version: int, tensors: dict[str, torch.Tensor], started: float, what: str, **how: bool
    ) -> float:
        """Packs what the loop packs off the event loop, then swaps `tensors` in between two decode
        steps (`BatchLoop.swap`'s `how`); the seconds since `started`."""
        packer = self._loop.packed
        packed = await asyncio.to_thread(packer.pack, tensors) if packer is not None else None
        swap = self._loop.swap(version, tensors, started, packed, **how)
        await asyncio.to_thread(swap.done.wait)
        if not swap.applied:
            raise Unavailable(f"the torch engine closed before {what} were swapped in")
        return swap.seconds

    async def hold(self) -> None:
        """`weight_sync="shared"`: returns once the decode loop is parked between two steps; it stays
        parked (requests queue) until the next `share_weights`."""
        if not await asyncio.to_thread(self._loop.hold):
            raise Unavailable("the torch engine is closed")

    async def status(self) -> EngineStatus:
        running, waiting = self._loop.load()
        counters = self._loop.counters
        return EngineStatus(
            model=self.name,
            policy_version=self._loop.version,
            max_context=self.max_context,
            vocab_size=self.vocab_size,
            running=running,
            waiting=waiting,
            ready=self._reloading == 0,
            extra={
                "decode_steps": float(counters.decode_steps),
                "decode_rows": float(counters.decode_rows),
                "shared_rows": float(counters.shared_rows),
                "generated_tokens": float(counters.generated_tokens),
                "prefill_tokens": float(counters.prefill_tokens),
                "prefix_hit_tokens": float(counters.prefix_hit_tokens),
                "prefix_row_tokens": float(counters.prefix_row_tokens),
                "reloads": float(counters.reloads),
                "last_reload_s": counters.last_reload_s,
                "reloading": float(self._reloading),
            },
        )

    # --- beyond the interface -------------------------------------------------------------------

    @property
    def policy_version(self) -> int:
        return self._loop.version

    def counters(self) -> StepCounters:
        """A snapshot of the decode loop's step/batch accounting."""
        return deepcopy(self._loop.counters)

    async def aclose(self) -> None:
        """Stops the decode loop within a bounded time (`BatchLoop.close`), even with a long or failing
        request in flight; requests still running end with finish reason `abort`."""
        await asyncio.to_thread(self._loop.close)

    def _read_fitting(self, uri: str) -> tuple[dict[str, torch.Tensor], dict[int, torch.Tensor] | None]:
        """The checkpoint's tensors, fitted to the model, and their packed linear weights."""
        tensors = fit_checkpoint(read_safetensors(uri), self._targets, self._aliases, uri)
        packer = self._loop.packed
        return tensors, packer.pack(tensors) if packer is not None else None


def _chunk(items: list[tuple]) -> tuple[TokenChunk | None, bool, ClawgymError | None]:
    """Folds queued (token, logprob, version, finish) items into one chunk; True when the request
    ended, with the error it failed with (raised after the tokens that came before it)."""
    ids, logprobs, versions = [], [], []
    finish, error = None, None
    for token, logprob, version, outcome in items:
        if isinstance(outcome, BaseException):
            error = (
                outcome
                if isinstance(outcome, ClawgymError)
                else Unavailable(f"engine step failed: {outcome}")
            )
            break
        if token is not None:
            ids.append(token)
            logprobs.append(logprob)
            versions.append(version)
        if outcome is not None:
            finish = outcome
            break
    ended = finish is not None or error is not None
    if not ids and finish is None:
        return None, ended, error
    return TokenChunk(ids, logprobs, versions, finish), ended, error
