"""The torch engine's decode loop: continuous batching of requests over one HF causal LM, in one thread.

Owns scheduling (admission, chunked prefill, shared decode steps, leaving on stop/length/abort)
and the weight swap between steps. It does not validate requests or speak asyncio beyond handing
tokens to each request's event loop; `clawgym.inference.torch_engine` is the async face.

One iteration of the loop:
  1. drop aborted requests; apply pending weight swaps (so a swap lands between two steps);
  2. prefill up to `prefill_chunk` prompt tokens: admit waiting requests while a row and the token
     budget allow, start each from the longest cached prefix of its prompt (`prefix_cache`), and
     run its remaining prompt in chunks (batch 1, its own cache); when a prompt is done, cache its
     KV, sample its first token and merge its cache into the running batch;
  3. one decode step for all running rows together: each row feeds its last token and samples
     the next; rows that finish leave the batch.
Tokens carry the policy version of the weights that computed them. After a swap, running rows
keep their KV cache from the old weights (as vLLM does); their new tokens carry the new version.
"""

import asyncio
import contextlib
import inspect
import logging
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field

import torch

from clawgym.inference.interface import FinishReason, SamplingParams
from clawgym.inference.kv_cache import BatchKVCache
from clawgym.inference.prefix_cache import PrefixCache
from clawgym.inference.sampler import sample_rows

log = logging.getLogger(__name__)


@dataclass
class StepCounters:
    """The loop's own accounting (read by tests, metrics and the bench)."""

    decode_steps: int = 0
    decode_rows: int = 0  # sum of batch sizes over decode steps
    batch_sizes: Counter = field(default_factory=Counter)  # batch size -> decode steps run at that size
    prefill_chunks: int = 0
    prefill_tokens: int = 0
    prefix_hit_tokens: int = 0  # prompt tokens taken from the prefix cache instead of computed
    generated_tokens: int = 0
    finished: Counter = field(default_factory=Counter)  # finish reason -> requests
    reloads: int = 0
    last_reload_s: float = 0.0


@dataclass(eq=False)
class Request:
    """One generation in flight. Owned by the loop thread once submitted, except `aborted`."""

    id: str
    prompt: list[int]
    params: SamplingParams
    limit: int  # most tokens it may generate
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue
    generator: torch.Generator
    aborted: bool = False
    generated: int = 0
    prefilled: int = 0
    cache: BatchKVCache | None = None  # its own cache while prefilling
    next_token: int = -1  # sampled, not yet fed to the model

    def end(self, outcome: "FinishReason | Exception") -> None:
        """Tells the consumer the request ended without a token: `abort` at shutdown, or the loop's error."""
        with contextlib.suppress(RuntimeError):  # the consumer's loop is gone: nobody to tell
            self.loop.call_soon_threadsafe(self.queue.put_nowait, (None, 0.0, 0, outcome))


def _deliver(items: list[tuple[Request, tuple]]) -> None:
    """Runs on the consumers' event loop: queues each (token, logprob, version, finish) item."""
    for request, item in items:
        request.queue.put_nowait(item)


@dataclass(eq=False)
class Swap:
    version: int
    tensors: dict[str, torch.Tensor]
    requested_at: float
    done: threading.Event = field(default_factory=threading.Event)
    applied: bool = False
    seconds: float = 0.0


class BatchLoop:
    """Runs the decode loop in a daemon thread; other threads talk to it through `submit`, `abort`, `swap`."""

    def __init__(
        self,
        model: torch.nn.Module,
        targets: dict[str, torch.Tensor],
        *,
        max_context: int,
        max_batch: int,
        max_batch_tokens: int,
        prefill_chunk: int,
        policy_version: int,
        prefix_cache_tokens: int = 0,
    ) -> None:
        self.model = model
        self.targets = targets
        self.max_context = max_context
        self.max_batch = max_batch
        self.max_batch_tokens = max_batch_tokens
        self.prefill_chunk = prefill_chunk
        self.version = policy_version
        self.counters = StepCounters()
        self.prefix_cache = PrefixCache(prefix_cache_tokens)  # loop thread only
        config = model.config.get_text_config()
        self._shape = (
            config.num_hidden_layers,
            config.num_key_value_heads,
            getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads,
        )
        param = next(model.parameters())
        self._dtype, self._device = param.dtype, param.device
        # transformers 5.x renamed `past_key_values` to `cache` (the old name warns until 5.40).
        params = inspect.signature(model.forward).parameters
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"

        self._cond = threading.Condition()
        self._waiting: deque[Request] = deque()  # guarded by _cond
        self._swaps: list[Swap] = []  # guarded by _cond
        self._closed = False  # guarded by _cond
        self._prefilling: Request | None = None  # loop thread only
        self._rows: list[Request] = []  # loop thread only; row i of self._cache
        self._cache: BatchKVCache | None = None  # loop thread only
        self._outbox: list[tuple[Request, tuple]] = []  # loop thread only; tokens of the current step
        self._thread = threading.Thread(target=self._run, name="clawgym-torch-engine", daemon=True)
        self._thread.start()

    # --- called from other threads ---------------------------------------------------------------

    def submit(self, request: Request) -> bool:
        """Queues a request; False when the loop is closed."""
        with self._cond:
            if self._closed:
                return False
            self._waiting.append(request)
            self._cond.notify()
        return True

    def abort(self, request: Request) -> None:
        """Marks a request aborted; the loop frees its row before the next step."""
        request.aborted = True
        with self._cond:
            self._cond.notify()

    def swap(self, version: int, tensors: dict[str, torch.Tensor], requested_at: float) -> Swap:
        """Schedules a weight swap for the next step boundary; wait on the returned `done` event."""
        swap = Swap(version, tensors, requested_at)
        with self._cond:
            if self._closed:
                swap.done.set()
                return swap
            self._swaps.append(swap)
            self._cond.notify()
        return swap

    def load(self) -> tuple[int, int]:
        """(running rows incl. the one prefilling, waiting requests), approximately."""
        running = len(self._rows) + (self._prefilling is not None)
        return running, len(self._waiting)

    def close(self, timeout: float = 30.0) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout)

    # --- the loop (its own thread) ----------------------------------------------------------------

    def _run(self) -> None:
        with torch.inference_mode():
            while True:
                with self._cond:
                    while not (
                        self._closed or self._waiting or self._swaps or self._rows or self._prefilling
                    ):
                        self._cond.wait()
                    if self._closed:
                        break
                    swaps, self._swaps = self._swaps, []
                try:
                    self._drop_aborted()
                    for swap in swaps:
                        self._apply(swap)
                    budget = self.prefill_chunk
                    while budget > 0 and (ran := self._prefill_step(budget)):
                        budget -= ran
                    if self._rows:
                        self._decode_step()
                    self._flush()
                except Exception as e:  # a failed forward must not hang its requests or kill the loop
                    log.exception("decode loop step failed; failing the running requests")
                    self._flush()
                    self._fail_running(e)
        self._shutdown()

    def _drop_aborted(self) -> None:
        with self._cond:
            for request in [r for r in self._waiting if r.aborted]:
                self._waiting.remove(request)
                self.counters.finished["abort"] += 1
        if self._prefilling is not None and self._prefilling.aborted:
            self._prefilling = None
            self.counters.finished["abort"] += 1
        if any(r.aborted for r in self._rows):
            self.counters.finished["abort"] += sum(r.aborted for r in self._rows)
            self._keep([i for i, r in enumerate(self._rows) if not r.aborted])

    def _apply(self, swap: Swap) -> None:
        """Points every target tensor at its new data: O(1) per tensor, between two steps."""
        for name, target in self.targets.items():
            target.data = swap.tensors[name]
        self.version = swap.version
        self.prefix_cache.clear()  # cached KV came from the old weights
        swap.applied = True
        swap.seconds = time.perf_counter() - swap.requested_at
        self.counters.reloads += 1
        self.counters.last_reload_s = swap.seconds
        swap.done.set()

    def _admit(self) -> Request | None:
        """The next waiting request if a row and the padded-token budget allow it."""
        with self._cond:
            if not self._waiting or len(self._rows) >= self.max_batch:
                return None
            head = self._waiting[0]
            width = self._cache.width if self._cache is not None else 0
            padded = (len(self._rows) + 1) * max(width, len(head.prompt)) + len(self._rows) + 1
            if self._rows and padded > self.max_batch_tokens:
                return None
            return self._waiting.popleft()

    def _prefill_step(self, budget: int) -> int:
        """Runs at most `budget` prompt tokens of the request being prefilled (admitting one if none
        is); returns the tokens run, 0 when there was nothing to prefill."""
        if self._prefilling is None:
            self._prefilling = self._admit()
            if self._prefilling is None:
                return 0
            self._start_prefill(self._prefilling)
        request = self._prefilling
        cache = request.cache
        chunk = request.prompt[request.prefilled : request.prefilled + min(budget, self.prefill_chunk)]
        n = len(chunk)
        cache.reserve(n, self.max_context)
        logits = self._forward(
            torch.tensor([chunk]),
            torch.arange(request.prefilled, request.prefilled + n)[None, :],
            cache.prefill_mask(n, self._dtype),
            cache,
        )
        cache.advance(n)
        request.prefilled += n
        self.counters.prefill_chunks += 1
        self.counters.prefill_tokens += n
        if request.prefilled < len(request.prompt):
            return n
        self._prefilling = None
        self.prefix_cache.insert(request.prompt, cache.keys, cache.values)
        token, logprob = self._sample([request], logits)
        if self._emit(request, token[0], logprob[0]) is None:
            request.next_token = token[0]
            if self._cache is None:
                self._cache = cache
            else:
                self._cache.merge(cache, self.max_context)
            request.cache = None
            self._rows.append(request)
        return n

    def _start_prefill(self, request: Request) -> None:
        """Gives an admitted request its own cache, starting from the longest cached prefix of its prompt."""
        layers, heads, dim = self._shape
        capacity = min(len(request.prompt) + 64, self.max_context)
        request.cache = BatchKVCache.empty(layers, heads, dim, capacity, self._dtype, self._device)
        hit = self.prefix_cache.lookup(request.prompt)
        if hit is None:
            return
        for layer, (k, v) in enumerate(zip(hit.entry.keys, hit.entry.values, strict=True)):
            request.cache.keys[layer][:, :, : hit.length] = k[:, :, : hit.length]
            request.cache.values[layer][:, :, : hit.length] = v[:, :, : hit.length]
        request.cache.advance(hit.length)
        request.prefilled = hit.length
        self.counters.prefix_hit_tokens += hit.length

    def _decode_step(self) -> None:
        cache = self._cache
        cache.reserve(1, self.max_context)
        logits = self._forward(
            torch.tensor([[r.next_token] for r in self._rows]),
            torch.tensor([[length] for length in cache.lengths]),
            cache.decode_mask(self._dtype),
            cache,
        )
        cache.advance(1)
        batch = len(self._rows)
        self.counters.decode_steps += 1
        self.counters.decode_rows += batch
        self.counters.batch_sizes[batch] += 1
        tokens, logprobs = self._sample(self._rows, logits)
        keep = []
        for i, (request, token, logprob) in enumerate(zip(self._rows, tokens, logprobs, strict=True)):
            if self._emit(request, token, logprob) is None:
                request.next_token = token
                keep.append(i)
        if len(keep) < batch:
            self._keep(keep)

    def _forward(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: BatchKVCache):
        """Last-position logits (B, V) of one forward that appends to `cache`."""
        out = self.model(
            input_ids=ids.to(self._device),
            position_ids=positions.to(self._device),
            attention_mask=mask,
            use_cache=True,
            logits_to_keep=1,
            **{self._cache_kwarg: cache.hf_cache()},
        )
        return out.logits[:, -1, :]

    def _sample(self, requests: list[Request], logits: torch.Tensor) -> tuple[list[int], list[float]]:
        return sample_rows(logits, [r.params for r in requests], [r.generator for r in requests])

    def _emit(self, request: Request, token: int, logprob: float) -> FinishReason | None:
        """Sends one token; returns the finish reason if the request ends with it."""
        request.generated += 1
        self.counters.generated_tokens += 1
        finish: FinishReason | None = None
        if token in request.params.stop_token_ids:
            finish = "stop"
        elif request.generated >= request.limit:
            finish = "length"
        self._outbox.append((request, (token, logprob, self.version, finish)))
        if finish is not None:
            self.counters.finished[finish] += 1
        return finish

    def _flush(self) -> None:
        """Hands this step's tokens to their event loops: one thread-safe call per loop, not per token."""
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Request, tuple]]] = {}
        for request, item in self._outbox:
            by_loop.setdefault(request.loop, []).append((request, item))
        self._outbox = []
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_deliver, items)
            except RuntimeError:  # the consumers' loop is closed: nobody will read these
                for request, _ in items:
                    request.aborted = True

    def _keep(self, rows: list[int]) -> None:
        self._rows = [self._rows[i] for i in rows]
        if not self._rows:
            self._cache = None
        else:
            self._cache.keep(rows)

    def _fail_running(self, error: Exception) -> None:
        for request in self._rows + ([self._prefilling] if self._prefilling else []):
            request.end(error)
        self._rows, self._cache, self._prefilling = [], None, None

    def _shutdown(self) -> None:
        """Ends every request still queued or running with finish reason `abort`; unblocks pending swaps."""
        self._flush()
        with self._cond:
            waiting, swaps = list(self._waiting), self._swaps
            self._waiting.clear()
            self._swaps = []
        for swap in swaps:
            swap.done.set()
        for request in waiting + self._rows + ([self._prefilling] if self._prefilling else []):
            request.end("abort")
        self._rows, self._cache, self._prefilling = [], None, None
