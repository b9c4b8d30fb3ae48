"""The torch engine's KV cache: one left-padded key/value buffer per layer for all running requests.

Owns the memory layout of continuous batching on a plain HF causal LM: rows join (a prefilled
request's cache is merged in), rows leave (finished or aborted requests), and every decode step
appends one column for all rows. It does not sample or schedule; `clawgym.inference.batch` does.

Layout, per layer: `keys[l]`, `values[l]`: (B, H_kv, capacity, D). Columns [start, end) are live,
and all rows are right-aligned at `end`: row b holds its `lengths[b]` tokens in
[end - lengths[b], end); the columns before are padding, masked out by `decode_mask`. Leaving rows
copy only the rows that fill their places and move `start`; joining rows are written into free
rows of the buffer (a re-lay only when rows or columns run out, growing the rows twofold), and
running out of capacity re-lays the buffer. `max_slots` (rows × columns, from the engine's byte
budget) caps every re-lay: spare rows and columns are dropped before the buffer would exceed it;
what the live rows need is the caller's admission to keep within it.
Position ids are per row (`positions()`: the next token's), so padding never shifts RoPE.
A row may start with a `SharedPrefix` that other rows share (`prefixes[b]`): its buffer row then
holds only the columns after that prefix, and `lengths[b]` counts those (`shared_prefix`).
"""

import torch
from transformers.cache_utils import Cache, DynamicLayer

from clawgym.inference.shared_prefix import SharedPrefix, distinct


class _LayerView(DynamicLayer):
    """Adapter that lets HF attention write into and read from one layer of a BatchKVCache."""

    def __init__(self, owner: "BatchKVCache", layer: int) -> None:
        super().__init__()
        self.owner, self.layer = owner, layer
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        return self.owner.write(self.layer, key_states, value_states)

    def get_seq_length(self) -> int:
        return self.owner.end - self.owner.start


class BatchKVCache:
    """Keys and values of the running rows, right-aligned, with per-row lengths."""

    def __init__(
        self,
        keys: list[torch.Tensor],
        values: list[torch.Tensor],
        start: int,
        end: int,
        lengths: list[int],
        max_slots: int = 0,
        prefixes: "list[SharedPrefix | None] | None" = None,
    ):
        self.keys, self.values = keys, values  # the rows' views of the buffers below
        self.max_slots = max_slots  # rows × columns the buffers may hold at most; 0 = unbounded
        # (R >= B, H, capacity, D) per layer: rows [B, R) are room for rows joining without a re-lay
        self._buffers_k, self._buffers_v = keys, values
        self.start, self.end = start, end
        self.lengths = lengths
        self.prefixes = prefixes or [None] * len(lengths)  # row b's shared first columns, if any

    @classmethod
    def empty(
        cls, num_layers: int, kv_heads: int, head_dim: int, capacity: int, dtype, device, max_slots: int = 0
    ) -> "BatchKVCache":
        """A one-row cache with room for `capacity` tokens (a request about to be prefilled); once the
        running batch, its re-lays hold at most `max_slots` rows × columns."""
        shape = (1, kv_heads, capacity, head_dim)
        keys = [torch.empty(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        values = [torch.empty(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        return cls(keys, values, 0, 0, [0], max_slots)

    # --- views for the model -------------------------------------------------------------------

    @property
    def rows(self) -> int:
        return len(self.lengths)

    @property
    def width(self) -> int:
        """Live columns, padding included: the attention span of a decode step before it appends."""
        return self.end - self.start

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2]

    @property
    def slots(self) -> int:
        """Rows × columns of the buffers (spare rows included): what the budget counts."""
        return self._buffers_k[0].shape[0] * self.capacity

    def positions(self) -> list[int]:
        """Each row's position for its next token: its prefix's length and its own columns."""
        return [len(p or ()) + n for p, n in zip(self.prefixes, self.lengths, strict=True)]

    def shared(self) -> list[SharedPrefix]:
        """The distinct prefixes the rows share."""
        return distinct(self.prefixes)

    def after_prefix(self, prefix: SharedPrefix) -> "BatchKVCache":
        """This one-row cache as a row of `prefix`: a view of its columns after the prefix's."""
        p = len(prefix)
        return BatchKVCache(
            self.keys, self.values, self.start + p, self.end, [self.lengths[0] - p], self.max_slots, [prefix]
        )

    def adopt(self, prefix: SharedPrefix, rows: list[int]) -> None:
        """Makes whole rows `rows` rows of `prefix`, which their first columns equal: no copy, their
        columns before its end become padding, and columns no row needs leave the live span."""
        for b in rows:
            self.lengths[b] -= len(prefix)
            self.prefixes[b] = prefix
        self.compact()

    def compact(self) -> None:
        """Re-lays the buffers as wide as the live rows need (and a little room), within the budget
        beside the prefixes: what a row of a prefix no longer holds is given back."""
        self.start = self.end - max(self.lengths)
        if self.capacity > 2 * self.width + 64:
            self._relayout(self.width + 64, needed=self.width + 1)

    def _bounded(self, rows: int, room: int, capacity: int, needed: int, shared: int) -> tuple[int, int]:
        """(room, capacity) with spare rows, then spare columns, dropped to fit `max_slots` beside the
        `shared` columns of the rows' prefixes."""
        budget = max(1, self.max_slots - shared)
        if not self.max_slots or room * capacity <= budget:
            return room, capacity
        room = max(rows, budget // capacity)
        if room * capacity > budget:
            capacity = max(needed, budget // room)
        return room, capacity

    def hf_cache(self) -> Cache:
        """An HF `Cache` whose layers append into this buffer; call `advance(n)` after the forward."""
        return Cache(layers=[_LayerView(self, i) for i in range(len(self.keys))])

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Writes n new columns at `end` and returns the live keys/values including them (B, H, width + n, D)."""
        n = k.shape[2]
        self.keys[layer][:, :, self.end : self.end + n] = k
        self.values[layer][:, :, self.end : self.end + n] = v
        return self.keys[layer][:, :, self.start : self.end + n], self.values[layer][
            :, :, self.start : self.end + n
        ]

    def advance(self, n: int) -> None:
        """Commits n columns written by every layer during one forward."""
        self.end += n
        self.lengths = [length + n for length in self.lengths]

    def reserve(self, n: int, limit: int) -> None:
        """Makes room for n more columns, re-laying the buffer (doubling, at most `limit`) when needed."""
        if self.end + n <= self.capacity:
            return
        needed = self.width + n
        capacity = min(max(2 * needed, 64), max(limit, needed))
        self._relayout(capacity, needed=needed)

    def decode_mask(self, dtype: torch.dtype) -> torch.Tensor:
        """Additive mask for one decode step: 0 where a row's own tokens are, dtype-min on padding.  (B, 1, 1, width + 1)."""
        width = self.width + 1
        first_valid = torch.tensor([width - (length + 1) for length in self.lengths])[:, None]
        valid = torch.arange(width)[None, :] >= first_valid
        mask = torch.zeros(valid.shape, dtype=dtype).masked_fill(~valid, torch.finfo(dtype).min)
        return mask[:, None, None, :].to(self.keys[0].device)

    def prefill_mask(self, n: int, dtype: torch.dtype) -> torch.Tensor:
        """Additive causal mask for n new tokens of a one-row cache over its past.  (1, 1, n, width + n)."""
        past = self.width
        query = torch.arange(n)[:, None] + past
        valid = torch.arange(past + n)[None, :] <= query
        mask = torch.zeros(valid.shape, dtype=dtype).masked_fill(~valid, torch.finfo(dtype).min)
        return mask[None, None].to(self.keys[0].device)

    # --- batched prefill ----------------------------------------------------------------------

    @classmethod
    def gather(cls, caches: "list[BatchKVCache]", extra: int) -> "BatchKVCache":
        """A batch of the one-row `caches` for one prefill forward of up to `extra` new tokens per row:
        row b holds caches[b]'s tokens right-aligned at column `past` (the longest), zeros before
        (masked, and finite so that a 0 weight times them stays 0); the forward writes its `extra`
        left-padded columns at `past`. `prefill_rows_mask` masks the padding; `new_columns` reads
        each row's real new columns back."""
        past = max(c.width for c in caches)
        first = caches[0].keys[0]
        shape = (len(caches), first.shape[1], past + extra, first.shape[3])
        keys = [first.new_zeros(shape) for _ in caches[0].keys]
        values = [first.new_zeros(shape) for _ in caches[0].keys]
        for b, c in enumerate(caches):
            if c.width:
                for layer in range(len(keys)):
                    keys[layer][b, :, past - c.width : past] = c.keys[layer][0, :, c.start : c.end]
                    values[layer][b, :, past - c.width : past] = c.values[layer][0, :, c.start : c.end]
        return cls(keys, values, 0, past, [c.width for c in caches])

    def prefill_rows_mask(self, news: list[int], dtype: torch.dtype) -> torch.Tensor:
        """Additive mask for a `gather`ed batch whose row b feeds `news[b]` real tokens left-padded to
        N = max(news): a real query sees its row's past and its real new tokens up to itself; a padding
        query sees only itself (its output is never read, but must stay finite).  (B, 1, N, past + N)."""
        past, n = self.end, max(news)
        keys = torch.arange(past + n)[None, None, :]
        query = torch.arange(n)[None, :, None] + past  # each query's own column
        lengths = torch.tensor(self.lengths)[:, None, None]
        first_new = past + n - torch.tensor(news)[:, None, None]
        own_past = (keys >= past - lengths) & (keys < past)
        own_new = (keys >= first_new) & (keys <= query)
        valid = torch.where(query >= first_new, own_past | own_new, keys == query)
        mask = torch.zeros(valid.shape, dtype=dtype).masked_fill(~valid, torch.finfo(dtype).min)
        return mask[:, None].to(self.keys[0].device)

    def append_row(self, batch: "BatchKVCache", row: int, n: int, limit: int) -> None:
        """Appends to this one-row cache the last n columns of row `row` of a `gather`ed batch after
        its forward (left-padded inputs: a row's real new tokens are its last columns)."""
        self.reserve(n, limit)
        stop = batch.keys[0].shape[2]
        for mine, theirs in ((self.keys, batch.keys), (self.values, batch.values)):
            for layer in range(len(mine)):
                mine[layer][:, :, self.end : self.end + n] = theirs[layer][row : row + 1, :, stop - n : stop]
        self.advance(n)

    # --- rows joining and leaving --------------------------------------------------------------

    def keep(self, rows: list[int]) -> list[int]:
        """Keeps only `rows` (ascending) and returns their old indices in their new order.

        Each dropped row below the new row count takes the last kept row beyond it, and the buffers
        become a prefix view of their rows: only the moved rows are copied. Copying every kept row
        (as an index_select does) moved the whole cache each time one request of a batch finished,
        ~1 GB for 32 SmolLM2 rows of 600 columns. Also drops the padding columns no remaining row
        needs."""
        n, kept = len(rows), set(rows)
        holes = [i for i in range(n) if i not in kept]  # dropped rows inside the new row count
        movers = [r for r in rows if r >= n]  # kept rows beyond it: as many as there are holes
        order = list(range(n))
        if holes:
            device = self.keys[0].device
            dst, src = torch.tensor(holes, device=device), torch.tensor(movers, device=device)
            for buffer in (*self.keys, *self.values):
                buffer[dst] = buffer[src]
            for hole, mover in zip(holes, movers, strict=True):
                order[hole] = mover
        self.keys = [k[:n] for k in self.keys]
        self.values = [v[:n] for v in self.values]
        self.lengths = [self.lengths[r] for r in order]
        self.prefixes = [self.prefixes[r] for r in order]
        if self.lengths:
            self.start = self.end - max(self.lengths)
        return order

    def merge(self, others: "list[BatchKVCache]", limit: int, max_rows: int = 0) -> None:
        """Appends the rows of `others` (same layers and heads) below these, in order, right-aligned
        at this cache's `end`. In place when the buffers have free rows and columns for them: the
        running rows are not copied (re-laying the whole batch each time prefilled requests joined
        was a fifth of a GRPO step's engine time). Otherwise one re-lay, growing the rows twofold
        (at most `max_rows`, if given) so that the next joins fit."""
        width = max(self.width, *(o.width for o in others))
        rows = self.rows + sum(o.rows for o in others)
        if rows > self._buffers_k[0].shape[0] or self.end < width or self.end >= self.capacity:
            capacity = min(max(self.capacity, 2 * width, 64), max(limit, width + 1))
            room = max(rows, min(2 * rows, max_rows)) if max_rows else rows
            shared = sum(map(len, distinct(p for c in (self, *others) for p in c.prefixes)))
            self._relayout(capacity, end=width, row_room=room, rows=rows, needed=width + 1, shared=shared)
        start = self.end - width
        if start < self.start:  # the running rows' new padding columns: masked, and must be finite
            for buffer in (*self.keys, *self.values):
                buffer[:, :, start : self.start] = 0
        row = self.rows
        for o in others:
            pad = self.end - o.width
            for mine, theirs in ((self._buffers_k, o.keys), (self._buffers_v, o.values)):
                for layer, buffer in enumerate(mine):
                    buffer[row : row + o.rows, :, start:pad] = 0
                    buffer[row : row + o.rows, :, pad : self.end] = theirs[layer][:, :, o.start : o.end]
            row += o.rows
        self.start = start
        self.lengths = [*self.lengths, *(length for o in others for length in o.lengths)]
        self.prefixes = [*self.prefixes, *(p for o in others for p in o.prefixes)]
        self.keys = [k[:rows] for k in self._buffers_k]
        self.values = [v[:rows] for v in self._buffers_v]

    def _relayout(
        self,
        capacity: int,
        end: int | None = None,
        row_room: int = 0,
        rows: int = 0,
        needed: int = 0,
        shared: int | None = None,
    ) -> None:
        """Fresh buffers of `capacity` columns and at least `row_room` rows (fewer, down to `rows`, and
        fewer columns, down to `needed`, when `max_slots` asks), the live columns copied right-aligned
        at column `end` (default: the live width, so `start` becomes 0), zeros before."""
        end = self.width if end is None else end
        live = self.rows
        room = max(live, row_room, self._buffers_k[0].shape[0])
        shared = sum(map(len, self.shared())) if shared is None else shared
        room, capacity = self._bounded(max(live, rows), room, capacity, max(needed, end), shared)
        pad = end - self.width
        buffers: tuple[list[torch.Tensor], list[torch.Tensor]] = ([], [])
        for old_layers, new_layers in ((self.keys, buffers[0]), (self.values, buffers[1])):
            for old in old_layers:
                new = old.new_empty((room, old.shape[1], capacity, old.shape[3]))
                new[:live, :, :pad] = 0  # columns after `end` are written before they are read
                new[:live, :, pad:end] = old[:, :, self.start : self.end]
                new_layers.append(new)
        self._buffers_k, self._buffers_v = buffers
        self.keys = [k[:live] for k in self._buffers_k]
        self.values = [v[:live] for v in self._buffers_v]
        self.start, self.end = pad, end
