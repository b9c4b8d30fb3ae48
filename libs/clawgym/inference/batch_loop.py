"""The torch engine's decode loop: continuous batching of requests over one HF causal LM, in one thread.

Owns scheduling (admission, chunked prefill, shared decode steps, leaving on stop/length/abort/error)
and the weight swap between steps. It does not validate requests or speak asyncio beyond handing
tokens to each request's event loop; `clawgym.inference.torch_engine` is the async face.

One iteration of the loop (a "step"):
  1. drop aborted requests; apply pending weight swaps (so a swap lands between two steps);
  2. admit waiting requests, in arrival order, while a row and the KV memory budget allow
     (`max_batch`; `kv_cache_mb`: rows × the longest prompt + generation limit among them, in bytes
     of keys and values, so an admitted batch never outgrows it); each starts from the longest
     prefix of its prompt already computed, in the prefix cache or by a request still prefilling,
     taken as it is admitted. A request whose prompt shares a prefix with one still prefilling
     waits until that one has computed it, then copies it (a GRPO group's G equal prompts are prefilled once); a prefix the
     request already has (a cache hit) is no reason to wait, so prompts behind a cached system
     prompt are admitted in one step;
  3. prefill at most `prefill_chunk` (P) prompt tokens in all, shared between the admitted prompts:
     up to P/4 to the oldest (so no prompt starves), the rest shortest-remaining first. The shares
     run batched (`_groups`): up to `prefill_batch` requests per forward, left-padded to the longest
     share in it, each row attending only to its own past and tokens (a failing batched forward is
     rerun one request at a time, so a failure still finds its own request); prompts of similar
     share share a forward, padding is at most a quarter of a forward's tokens or `PAD_SLACK`.
     A prompt that is done is cached and samples its first token; those done this step join the
     running batch together;
  4. one decode step for all running rows together: each row feeds its last token and samples the
     next; rows that finish leave the batch. Rows whose prompts share at least
     `shared_prefix_tokens` first tokens, computed by one version (a harness's system prompt and
     tools), keep one copy of them (`shared_prefix`): a prompt joins the longest such prefix it
     starts with, or founds one with the other prompts running or joining; admission counts a
     prefix once (and a prefilling prompt's own copy until it joins).
Fairness bound: a step computes at most P prompt tokens (plus padding, above) and one decode token
per running row, however its prefill is batched, so running rows get a token every step however
long a prompt is being prefilled, and a newcomer whose uncomputed prompt (plus those of shorter
prompts prefilling with it) is at most 3P/4 tokens gets its first token at the end of the step after
the one it arrived in: at most 2P prompt tokens computed from its arrival to its first token
(P = 512 by default), given a free row and memory budget (admission stays in arrival order, so a
long prompt that does not fit yet holds back those behind it rather than starve). A newcomer that
follows a prompt still prefilling computes no more than that bound, but waits for its leader to
pass the shared prefix.
Failures stay with their request: a prefill (rerun alone when batched) or a sample is one request's;
the rows of a batched prefill forward never attend to each other's KV (NaN in one stays there); a
row whose logits are not finite (the sampler refuses NaN/inf) fails alone; only a failure of the
shared decode forward, which no row can be blamed for, fails the rows of that step.
Tokens carry the policy version of the weights that computed them. After a swap, running rows
keep their KV cache from the old weights (as vLLM does); their new tokens carry the new version.
A loop whose weights are another's tensors (a trainer's, `TorchEngine.share_weights`) is parked by
`hold` while their owner changes them: no forward runs from its return until a swap that releases
it, so no token is computed by weights of no version.
"""

import asyncio
import contextlib
import inspect
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import Literal

import torch

from clawgym.errors import ClawgymError
from clawgym.inference.interface import FinishReason, SamplingParams
from clawgym.inference.kv_cache import BatchKVCache
from clawgym.inference.packed_linear import PackedLinears, layers_worth_packing
from clawgym.inference.prefix_cache import PrefixCache, common_prefix
from clawgym.inference.sampler import Sampled, sample_rows
from clawgym.inference.shared_prefix import (
    SHARED_PREFIX_ATTENTION,
    PrefixGroups,
    SharedPrefix,
    distinct,
    group_rows,
    shared_length,
)

log = logging.getLogger(__name__)

# Padding tokens a batched prefill forward may carry whatever its size: on CPU one more forward of a
# small model costs about as much as this many tokens (kernel launches, per-layer Python).
PAD_SLACK = 64


@dataclass
class StepCounters:
    """The loop's own accounting (read by tests, metrics and the bench)."""

    decode_steps: int = 0
    decode_rows: int = 0  # sum of batch sizes over decode steps
    shared_rows: int = 0  # of those, rows that read a shared prefix instead of their own copy
    batch_sizes: Counter = field(default_factory=Counter)  # batch size -> decode steps run at that size
    prefill_chunks: int = 0
    prefill_forwards: int = 0  # forwards that ran them (several prompts' chunks share one when batched)
    prefill_tokens: int = 0
    prefix_hit_tokens: int = 0  # prompt tokens taken from the prefix cache instead of computed
    prefix_row_tokens: int = 0  # prompt tokens read from a running shared prefix, neither computed nor copied
    generated_tokens: int = 0
    finished: Counter = field(default_factory=Counter)  # finish reason (or "error") -> requests
    reloads: int = 0
    last_reload_s: float = 0.0
    kv_bytes_peak: int = 0  # the running batch's KV buffers at their largest, spare room included


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
    ended: bool = False  # told its end by `end` (shutdown): nothing more is sent
    generated: int = 0
    prefilled: int = 0
    cache: BatchKVCache | None = None  # its own cache while prefilling
    kv_version: int = -1  # the policy version its prefill started under
    next_token: int = -1  # sampled, not yet fed to the model
    prefix: SharedPrefix | None = None  # the running rows' prefix it was admitted to join (kept alive)

    @cached_property
    def prompt_ids(self) -> torch.Tensor:
        """The prompt as an int64 tensor, made once: admission, prefix matching and joining compare
        it with other prompts every step they run."""
        return torch.tensor(self.prompt)

    @property
    def remaining(self) -> int:
        """Prompt tokens still to prefill."""
        return len(self.prompt) - self.prefilled

    def end(self, outcome: "FinishReason | Exception") -> None:
        """Tells the consumer, once, that the request ended without a token (`abort` at shutdown)."""
        if self.ended:
            return
        self.ended = True
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
    packed: dict[int, torch.Tensor] | None = None  # PackedLinears.pack of `tensors`, when packing
    copy_in: bool = False  # copy `tensors` into the targets (casting) instead of pointing at them
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
        kv_cache_mb: float,
        prefill_chunk: int,
        policy_version: int,
        prefix_cache_tokens: int = 0,
        prefill_batch: int = 32,
        pack_weights: bool | Literal["auto"] = "auto",
        pack_weights_mb: float = 0,
        shared_prefix_tokens: int = 0,
    ) -> None:
        self.model = model
        self.prefill_batch = prefill_batch
        self.targets = targets
        self.max_context = max_context
        self.max_batch = max_batch
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
        # rows whose prompts share at least this many tokens keep them once (`shared_prefix`); only
        # over SDPA's full attention, which the shared-prefix attention computes exactly
        self.min_share = shared_prefix_tokens if _can_share(model) else 0
        if self.min_share:
            model.set_attn_implementation(SHARED_PREFIX_ATTENTION)
        layers, heads, dim = self._shape
        self.slot_bytes = 2 * layers * heads * dim * param.element_size()  # one token's keys and values
        self.max_slots = max(1, int(kv_cache_mb * 2**20) // self.slot_bytes)
        # None: every layer (True), or none (False); "auto": the measured list, which may be empty
        layers = (
            layers_worth_packing(model, max_batch, budget_mb=pack_weights_mb)
            if pack_weights == "auto"
            else None
        )
        packs = pack_weights and layers != []
        self.packed = PackedLinears(model, targets, rows_hint=max_batch, layers=layers) if packs else None
        # transformers 5.x renamed `past_key_values` to `cache` (the old name warns until 5.40).
        params = inspect.signature(model.forward).parameters
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"

        self._cond = threading.Condition()
        self._waiting: deque[Request] = deque()  # guarded by _cond
        self._swaps: list[Swap] = []  # guarded by _cond
        self._closed = False  # guarded by _cond
        self._held = False  # guarded by _cond: `hold` asked the loop to park between steps
        self._parked = False  # guarded by _cond: the loop is parked (no forward runs)
        self._prefilling: list[Request] = []  # loop thread only; admitted, prompt not done, oldest first
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
            self._cond.notify_all()
        return True

    def abort(self, request: Request) -> None:
        """Marks a request aborted; the loop frees its row before the next step."""
        request.aborted = True
        with self._cond:
            self._cond.notify_all()

    def swap(
        self,
        version: int,
        tensors: dict[str, torch.Tensor],
        requested_at: float,
        packed: dict[int, torch.Tensor] | None = None,
        release: bool = False,
        copy_in: bool = False,
    ) -> Swap:
        """Schedules a weight swap for the next step boundary; wait on the returned `done` event.
        `packed`: `self.packed.pack(tensors)`, required when the loop packs its weights; `release`:
        ends a `hold`, the swap applied before any forward; `copy_in`: the targets keep their memory
        and take copies of `tensors` in their dtype (no second set of weights while it waits)."""
        if self.packed is not None and packed is None:
            raise ValueError("this loop packs its linear weights: pass packed=loop.packed.pack(tensors)")
        swap = Swap(version, tensors, requested_at, packed, copy_in)
        with self._cond:
            if self._closed:
                swap.done.set()
                return swap
            self._swaps.append(swap)
            if release:
                self._held = False
            self._cond.notify_all()
        return swap

    def hold(self) -> bool:
        """Parks the loop at its next step boundary and returns once it is parked (False: it closed):
        from then until a swap with `release` no forward runs; requests still queue."""
        with self._cond:
            self._held = True
            self._cond.notify_all()
            while not (self._parked or self._closed):
                self._cond.wait()
            return not self._closed

    def load(self) -> tuple[int, int]:
        """(running rows incl. those prefilling, waiting requests), approximately."""
        return len(self._rows) + len(self._prefilling), len(self._waiting)

    def close(self, timeout: float = 30.0) -> None:
        """Stops the loop at the next step boundary (a step is bounded: at most `prefill_chunk` prompt
        tokens and one decode step) and returns within `timeout` whatever the loop is doing: if a
        step still runs then, every request is told `abort` from here and the loop exits after it."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("decode loop still in a step after %.0f s; aborting its requests now", timeout)
            with self._cond:
                waiting = list(self._waiting)
            for request in waiting + list(self._rows) + list(self._prefilling):
                request.end("abort")

    # --- the loop (its own thread) ----------------------------------------------------------------

    def _run(self) -> None:
        # torch fixes a thread's intra-op count at its first call: now, the share the process set,
        # not whatever a trainer's SFT step (`trainer.loop.torch_threads`) sets while this loop waits
        torch.get_num_threads()
        if self.packed is not None:
            self.packed.own_thread()
        with torch.inference_mode():
            while True:
                with self._cond:
                    while not self._closed and (
                        self._held or not (self._waiting or self._swaps or self._rows or self._prefilling)
                    ):
                        if self._held and not self._parked:
                            self._parked = True
                            self._cond.notify_all()  # `hold` waits for this
                        self._cond.wait()
                    self._parked = False
                    if self._closed:
                        self._cond.notify_all()  # a `hold` waiting returns False
                        break
                    swaps, self._swaps = self._swaps, []
                try:
                    self._drop_aborted()
                    for swap in swaps:
                        self._apply(swap)
                    self._admit()
                    self._prefill()
                    if self._rows:
                        self._decode_step()
                    self._flush()
                except Exception as e:  # a bug in the loop itself: its state cannot be trusted
                    log.exception("decode loop step failed; failing the running requests")
                    lost, self._prefilling = self._prefilling, []
                    for request in lost:
                        self._fail(request, e)
                    self._fail_running(e)
        self._shutdown()

    def _drop_aborted(self) -> None:
        with self._cond:
            for request in [r for r in self._waiting if r.aborted]:
                self._waiting.remove(request)
                self.counters.finished["abort"] += 1
        for request in [r for r in self._prefilling if r.aborted]:
            self._prefilling.remove(request)
            self.counters.finished["abort"] += 1
        if any(r.aborted for r in self._rows):
            self.counters.finished["abort"] += sum(r.aborted for r in self._rows)
            self._keep([i for i, r in enumerate(self._rows) if not r.aborted])

    def _apply(self, swap: Swap) -> None:
        """Points every target tensor at its new data (O(1) per tensor), or copies it in, between two steps."""
        for name, target in self.targets.items():
            if swap.copy_in:
                target.data.copy_(swap.tensors[name])
            else:
                target.data = swap.tensors[name]
        if self.packed is not None:  # `swap` refused a swap without its packed weights
            self.packed.install(swap.packed)
        self.version = swap.version
        self.prefix_cache.clear()  # cached KV came from the old weights
        swap.applied = True
        swap.seconds = time.perf_counter() - swap.requested_at
        self.counters.reloads += 1
        self.counters.last_reload_s = swap.seconds
        swap.done.set()

    # --- admission and prefill --------------------------------------------------------------------

    def _admit(self) -> None:
        """Moves waiting requests, in arrival order, to prefilling while a row and the KV memory
        budget allow; one that should follow a prefilling prompt stays waiting (`_follows`). Each
        starts its prefill as it is admitted, so the next one's `_follows` sees the prefix it already
        has: the prompts behind a cached one are admitted together, not one per step."""
        with self._cond:  # the queue is read under the lock; only this thread removes from it
            candidates = list(self._waiting)
        admitted: list[Request] = []
        for request in candidates:
            if len(self._rows) + len(self._prefilling) >= self.max_batch:
                break
            prefix = self._prefix_of(request, self._prefixes_held()) if self.min_share else None
            if not self._fits(request, prefix, self._prefilling):
                break  # in order: a long prompt is not starved by shorter ones behind it
            if self._follows(request, self._prefilling):
                continue
            request.prefix = prefix
            self._start_prefill(request)
            self._prefilling.append(request)
            admitted.append(request)
        if admitted:
            with self._cond:
                for request in admitted:
                    self._waiting.remove(request)

    def _fits(self, request: Request, prefix: SharedPrefix | None, busy: list[Request]) -> bool:
        """Whether the batch, once every prefilling prompt and this one (a row of `prefix`, if any)
        joined it, stays within the KV budget however long each row generates: rows × the longest
        own columns + generation limit (rows are right-aligned, so the buffer is as wide as its
        longest row), and each prefix once (a prompt admitted to a held prefix is prefilled over it,
        without a copy: `_start_prefill`). An empty batch takes one request (`needs_slots` refused
        those that never fit)."""
        if not self._rows and not busy:
            return True
        running = self._cache.prefixes if self._cache is not None else []
        newcomers = [(r, r.prefix) for r in busy] + [(request, prefix)]
        rows = [*zip(self._rows, running, strict=True), *newcomers]
        own = [self.needs_slots(r.prompt, r.limit) - len(p or ()) for r, p in rows]
        shared = sum(map(len, self._prefixes_held()))  # `prefix` is one of them
        return len(own) * max(own) + shared <= self.max_slots

    def _prefixes_held(self) -> list[SharedPrefix]:
        """The prefixes of running rows and of prompts admitted to join one, each once."""
        running = self._cache.prefixes if self._cache is not None else []
        return distinct([*running, *(r.prefix for r in self._prefilling)])

    def _prefix_of(self, request: Request, prefixes: list[SharedPrefix]) -> SharedPrefix | None:
        """The longest of `prefixes` that the request's prompt (computed by its version) starts with."""
        prompt = request.prompt_ids
        version = request.kv_version if request.kv_version >= 0 else self.version
        fitting = [p for p in prefixes if p.starts(prompt, version)]
        return max(fitting, key=len, default=None)

    @staticmethod
    def needs_slots(prompt: list[int], limit: int) -> int:
        """Cache columns a request may hold at its end: its prompt and every token it may generate."""
        return len(prompt) + limit

    def _follows(self, request: Request, busy: list[Request]) -> bool:
        """True while a prefilling request has yet to compute a prefix this prompt shares: waiting for
        it costs nothing extra, computing it twice would. Only for a leader whose KV stays reusable:
        its prompt fits the prefix cache (a prefix of `min_hit` tokens or more), or it will hold the
        prefix as a shared one (`min_share` tokens or more: it joins as that prefix's first row, since
        `_shared` counts the prompts still waiting; a long harness prompt beyond the cache)."""
        prompt = request.prompt_ids
        cache = self.prefix_cache
        for leader in busy:
            if leader.kv_version not in (-1, self.version):
                continue
            shared = min(common_prefix(prompt, leader.prompt_ids), len(request.prompt) - 1)
            cached = len(leader.prompt) <= cache.max_tokens and shared >= cache.min_hit
            held = self.min_share > 0 and leader.prefix is None and shared >= self.min_share
            if (cached or held) and leader.prefilled < shared:
                return True
        return False

    def _start_prefill(self, request: Request) -> None:
        """Gives an admitted request its own cache, starting from the longest computed prefix of its
        prompt: a prefix cache entry, or the first columns of a prompt still prefilling. A request
        admitted to a held shared prefix (`request.prefix`) keeps only the columns after it: its
        prefill attends to the prefix's one copy as its decode steps will (no copy of a harness's
        thousands of system-prompt tokens per prompt being prefilled)."""
        layers, heads, dim = self._shape
        skip = len(request.prefix or ())  # prompt positions the cache does not hold
        capacity = min(len(request.prompt) - skip + 64, self.max_context)
        request.cache = BatchKVCache.empty(
            layers, heads, dim, capacity, self._dtype, self._device, self.max_slots
        )
        if request.prefix is not None:
            request.cache.prefixes = [request.prefix]
        request.kv_version = self.version
        request.prefilled = skip
        self.counters.prefix_row_tokens += skip
        hit = self.prefix_cache.lookup(request.prompt)
        # positions computed, their keys and values, and the first position the source holds (a
        # prefilling cache holds its positions from column 0, after its own prefix if it has one)
        length, keys, values, offset = (hit.length, hit.entry.keys, hit.entry.values, 0) if hit else (0, [], [], 0)
        prompt = request.prompt_ids
        for other in self._prefilling:
            if other.kv_version != self.version:  # computed by weights swapped out since
                continue
            shared = min(common_prefix(prompt, other.prompt_ids), other.prefilled)
            shared = min(shared, len(request.prompt) - 1)  # its last token's logits are needed
            held_from = len(other.prefix or ())
            if shared > length and shared >= self.prefix_cache.min_hit and held_from <= skip:
                length, keys, values, offset = shared, other.cache.keys, other.cache.values, held_from
        if length <= skip:
            return
        for layer, (k, v) in enumerate(zip(keys, values, strict=True)):
            request.cache.keys[layer][:, :, : length - skip] = k[:, :, skip - offset : length - offset]
            request.cache.values[layer][:, :, : length - skip] = v[:, :, skip - offset : length - offset]
        request.cache.advance(length - skip)
        request.prefilled = length
        self.counters.prefix_hit_tokens += length - skip

    def _prefill(self) -> None:
        """Runs this step's prefill plan, several prompts per forward (`_groups`); a request whose
        prefill fails fails alone: a batched forward that raises is retried one request at a time.
        Prompts done this step join the running batch together at the end (one re-lay of its KV)."""
        joining: list[Request] = []
        try:
            for group in self._groups(self._plan()):
                if self._closed:
                    return
                if len(group) > 1:
                    try:
                        logits, batch = self._forward_rows(group)
                    except Exception:  # the shared forward: find whose it is by running each alone
                        log.exception(
                            "batched prefill of %d requests failed; retrying each alone", len(group)
                        )
                    else:
                        for b, (request, n) in enumerate(group):
                            if self._guarded(request, partial(self._take_row, request, n, batch, b, logits)):
                                joining.append(request)
                        continue
                for request, n in group:
                    if self._guarded(request, partial(self._prefill_alone, request, n)):
                        joining.append(request)
        finally:
            self._join(joining)

    def _guarded(self, request: Request, work: Callable[[], bool]) -> bool:
        """Runs one request's share of the prefill (True: its prompt is done, it joins the batch);
        an exception fails that request only."""
        try:
            return work()
        except Exception as e:  # its own forward or sample: nobody else's
            log.exception("prefill of request %s failed", request.id)
            if request in self._prefilling:
                self._prefilling.remove(request)
            request.cache = None
            self._fail(request, e)
            return False

    def _groups(self, plan: list[tuple[Request, int]]) -> list[list[tuple[Request, int]]]:
        """Splits the plan into forwards of at most `prefill_batch` requests, longest shares first; a
        request joins the current forward while the padding its left-padded shape (rows × longest
        share) adds stays within a quarter of the real tokens in it or `PAD_SLACK`, whichever is more:
        short prompts batch freely (a forward's fixed cost outweighs their padding), long shares of
        unequal length run apart (padding would cost more than the forward it saves)."""
        groups: list[list[tuple[Request, int]]] = []
        for request, n in sorted(plan, key=lambda item: -item[1]):
            group = groups[-1] if groups else None
            if group and len(group) < self.prefill_batch:
                real = n + sum(m for _, m in group)
                if (len(group) + 1) * group[0][1] - real <= max(PAD_SLACK, real // 4):
                    group.append((request, n))
                    continue
            groups.append([(request, n)])
        return groups

    def _plan(self) -> list[tuple[Request, int]]:
        """Prompt tokens per prefilling request this step, `prefill_chunk` in all: up to a quarter to
        the oldest (no prompt starves), then shortest remaining first; run in that order."""
        if not self._prefilling:
            return []
        budget = self.prefill_chunk
        grants = dict.fromkeys(self._prefilling, 0)
        oldest = self._prefilling[0]
        grants[oldest] = min(oldest.remaining, budget // 4)
        budget -= grants[oldest]
        order = sorted(self._prefilling, key=lambda r: r.remaining)  # stable: ties go to the older
        for request in order:
            extra = min(request.remaining - grants[request], budget)
            grants[request] += extra
            budget -= extra
        return [(r, grants[r]) for r in order if grants[r] > 0]

    def _prefill_alone(self, request: Request, n: int) -> bool:
        """Runs the next n prompt tokens of `request` in a forward of its own cache (batch 1)."""
        cache = request.cache
        chunk = request.prompt[request.prefilled : request.prefilled + n]
        cache.reserve(n, self.max_context)
        logits = self._forward(
            torch.tensor([chunk]),
            torch.arange(request.prefilled, request.prefilled + n)[None, :],
            cache.prefill_mask(n, self._dtype),
            cache,
            **self._over_prefixes([request]),
        )
        cache.advance(n)
        self.counters.prefill_forwards += 1
        return self._prefilled(request, n, logits[0])

    def _forward_rows(self, group: list[tuple[Request, int]]) -> tuple[torch.Tensor, BatchKVCache]:
        """One forward of the next n_b prompt tokens of each request b, left-padded to the longest
        share (padding repeats the row's own first new token, so a row's padding is as finite as the
        row); each row attends only to its own past and tokens. Returns the last-position logits
        (B, V) and the batch cache holding the new KV columns."""
        news = [n for _, n in group]
        width = max(news)
        batch = BatchKVCache.gather([r.cache for r, _ in group], width)
        ids, positions = [], []
        for request, n in group:
            chunk = request.prompt[request.prefilled : request.prefilled + n]
            ids.append([chunk[0]] * (width - n) + chunk)
            positions.append(
                [request.prefilled] * (width - n) + list(range(request.prefilled, request.prefilled + n))
            )
        logits = self._forward(
            torch.tensor(ids),
            torch.tensor(positions),
            batch.prefill_rows_mask(news, self._dtype),
            batch,
            **self._over_prefixes([r for r, _ in group]),
        )
        self.counters.prefill_forwards += 1
        return logits, batch

    def _over_prefixes(self, requests: list[Request]) -> dict[str, PrefixGroups]:
        """A prefill forward's attention kwargs: the shared prefixes its rows are prefilled over."""
        groups = group_rows([r.prefix for r in requests], self._device) if self.min_share else None
        return {"shared_prefix": groups} if groups is not None else {}

    def _take_row(
        self, request: Request, n: int, batch: BatchKVCache, row: int, logits: torch.Tensor
    ) -> bool:
        """Copies row `row`'s new KV of a batched prefill forward into the request's own cache."""
        request.cache.append_row(batch, row, n, self.max_context)
        return self._prefilled(request, n, logits[row])

    def _prefilled(self, request: Request, n: int, logits: torch.Tensor) -> bool:
        """Counts n more prompt tokens of `request` computed; when its prompt is done, caches it and
        samples its first token from `logits` (V,); True when it should join the running batch."""
        request.prefilled += n
        self.counters.prefill_chunks += 1
        self.counters.prefill_tokens += n
        if request.remaining > 0:
            return False
        self._prefilling.remove(request)
        sampled = self._sample([request], logits[None])
        if sampled.failed:
            request.cache = None
            self._fail(request, _not_finite(request))
            return False
        if request.prefix is None:  # only KV that sampled
            self.prefix_cache.insert(request.prompt, request.cache.keys, request.cache.values)
        elif self.prefix_cache.wants(request.prompt):  # its whole prompt's KV, built only to be kept
            self.prefix_cache.insert(request.prompt, *self._whole_kv(request))
        token = sampled.tokens[0]
        if self._emit(request, token, sampled.logprobs[0]) is not None:
            request.cache = None
            return False
        request.next_token = token
        return True

    @staticmethod
    def _whole_kv(request: Request) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The keys and values of a request prefilled over a shared prefix, from its prompt's first
        position: the prefix's, then its cache's."""
        cache, prefix = request.cache, request.prefix
        own = slice(cache.start, cache.end)
        return (
            [torch.cat([p, k[:, :, own]], dim=2) for p, k in zip(prefix.keys, cache.keys, strict=True)],
            [torch.cat([p, v[:, :, own]], dim=2) for p, v in zip(prefix.values, cache.values, strict=True)],
        )

    def _join(self, requests: list[Request]) -> None:
        """Merges the caches of prefilled requests into the running batch, in one re-lay; each joins
        as a row of a shared prefix where one applies (`_shared`)."""
        if not requests:
            return
        caches = self._shared(requests) if self.min_share else [r.cache for r in requests]
        if self._cache is None:
            self._cache, caches = caches[0], caches[1:]
        if caches:
            self._cache.merge(caches, self.max_context, self.max_batch)
        self._cache.compact()  # a first row of a prefix came in its whole prompt's buffer
        self._count_kv()
        for request in requests:
            request.cache, request.prefix = None, None
            self._rows.append(request)

    def _shared(self, requests: list[Request]) -> list[BatchKVCache]:
        """The joining requests' caches, each as a row of the longest shared prefix its prompt starts
        with (same tokens, computed by the same weights), or of a new one: the tokens it shares with
        the least alike of the other prompts running, joining or waiting that share `min_share` or more (a
        harness's system prompt and tools, when other tasks' prompts are there); else whole. One
        prefilled over its prefix is a row of that prefix already."""
        prefixes = distinct([*(r.prefix for r in requests), *self._prefixes_held()])
        with self._cond:  # prompts that follow one of these (`_follows`) are admitted over its prefix
            waiting = list(self._waiting)
        caches = []
        for request in requests:
            cache, prompt = request.cache, request.prompt_ids
            if cache.prefixes[0] is not None:  # prefilled over its prefix: already a row of it
                caches.append(cache)
                continue
            prefix = self._prefix_of(request, prefixes)
            if prefix is None:
                others = [r.prompt_ids for r in (*self._rows, *requests, *waiting) if r is not request]
                n = shared_length(prompt, others, self.min_share)
                if n:
                    columns = slice(cache.start, cache.start + n)
                    prefix = SharedPrefix(
                        prompt[:n].clone(),
                        [k[:, :, columns].clone() for k in cache.keys],
                        [v[:, :, columns].clone() for v in cache.values],
                        request.kv_version,
                    )
                    prefixes.append(prefix)
                    self._adopt(prefix)
            caches.append(cache if prefix is None else cache.after_prefix(prefix))
        return caches

    def _adopt(self, prefix: SharedPrefix) -> None:
        """Running rows that hold a new prefix's tokens whole, computed by its weights, become its rows."""
        if self._cache is None:
            return
        rows = [
            b
            for b, (request, mine) in enumerate(zip(self._rows, self._cache.prefixes, strict=True))
            if mine is None and prefix.starts(request.prompt_ids, request.kv_version)
        ]
        if rows:
            self._cache.adopt(prefix, rows)

    def _count_kv(self) -> None:
        shared = sum(map(len, self._cache.shared()))
        self.counters.kv_bytes_peak = max(
            self.counters.kv_bytes_peak, (self._cache.slots + shared) * self.slot_bytes
        )

    # --- decode -----------------------------------------------------------------------------------

    def _decode_step(self) -> None:
        cache = self._cache
        cache.reserve(1, self.max_context)
        self._count_kv()
        try:
            groups = group_rows(cache.prefixes, self._device) if self.min_share else None
            logits = self._forward(
                torch.tensor([[r.next_token] for r in self._rows]),
                torch.tensor([[position] for position in cache.positions()]),
                cache.decode_mask(self._dtype),
                cache,
                **({"shared_prefix": groups} if groups is not None else {}),
            )
        except Exception as e:  # the shared forward: no one row to blame, so its rows fail
            log.exception("decode step of %d rows failed", len(self._rows))
            self._fail_running(e)
            return
        cache.advance(1)
        batch = len(self._rows)
        self.counters.decode_steps += 1
        self.counters.decode_rows += batch
        self.counters.shared_rows += sum(p is not None for p in cache.prefixes)
        self.counters.batch_sizes[batch] += 1
        sampled = self._sample(self._rows, logits)
        failed = set(sampled.failed)
        keep = []
        for i, request in enumerate(self._rows):
            if i in failed:
                self._fail(request, _not_finite(request))
            elif self._emit(request, sampled.tokens[i], sampled.logprobs[i]) is None:
                request.next_token = sampled.tokens[i]
                keep.append(i)
        if len(keep) < batch:
            self._keep(keep)

    def _forward(
        self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: BatchKVCache, **extra
    ):
        """Last-position logits (B, V) of one forward that appends to `cache` (`extra`: the attention's
        own kwargs, `shared_prefix` in a decode step)."""
        out = self.model(
            input_ids=ids.to(self._device),
            position_ids=positions.to(self._device),
            attention_mask=mask,
            use_cache=True,
            logits_to_keep=1,
            **{self._cache_kwarg: cache.hf_cache()},
            **extra,
        )
        return out.logits[:, -1, :]

    def _sample(self, requests: list[Request], logits: torch.Tensor) -> Sampled:
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

    def _fail(self, request: Request, error: Exception) -> None:
        """Ends one request with `error`, after the tokens it was already sent (same outbox)."""
        self._outbox.append((request, (None, 0.0, 0, error)))
        self.counters.finished["error"] += 1

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
        """Keeps the running rows `rows` (ascending); the cache decides their new order."""
        if not rows:
            self._rows, self._cache = [], None
        else:
            self._rows = [self._rows[i] for i in self._cache.keep(rows)]

    def _fail_running(self, error: Exception) -> None:
        """Fails the running rows, whose shared KV cache is lost, and hands out their errors."""
        for request in self._rows:
            self._fail(request, error)
        self._rows, self._cache = [], None
        self._flush()

    def _shutdown(self) -> None:
        """Ends every request still queued or running with finish reason `abort`; unblocks pending swaps."""
        self._flush()
        with self._cond:
            waiting, swaps = list(self._waiting), self._swaps
            self._waiting.clear()
            self._swaps = []
        for swap in swaps:
            swap.done.set()
        for request in waiting + self._rows + self._prefilling:
            request.end("abort")
        self._rows, self._cache, self._prefilling = [], None, []
        if self.packed is not None:
            self.packed.release()  # the model may outlive this loop: its packed weights need not


def _can_share(model: torch.nn.Module) -> bool:
    """Whether decode steps may read shared prefixes: full attention through SDPA (or already ours)."""
    config = model.config.get_text_config()
    return model.config._attn_implementation in ("sdpa", SHARED_PREFIX_ATTENTION) and (
        getattr(config, "sliding_window", None) is None
    )


def _not_finite(request: Request) -> ClawgymError:
    return ClawgymError(
        f"request {request.id or '?'}: the policy's logits are not finite (NaN or inf) after "
        f"{request.generated} generated tokens; it cannot be sampled and was ended"
    )
