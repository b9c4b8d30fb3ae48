"""The torch engine's KV cache: one left-padded key/value buffer per layer for all running requests.

Owns the memory layout of continuous batching on a plain HF causal LM: rows join (a prefilled
request's cache is merged in), rows leave (finished or aborted requests), and every decode step
appends one column for all rows. It does not sample or schedule; `clawgym.inference.batch` does.

Layout, per layer: `keys[l]`, `values[l]`: (B, H_kv, capacity, D). Columns [start, end) are live,
and all rows are right-aligned at `end`: row b holds its `lengths[b]` tokens in
[end - lengths[b], end); the columns before are padding, masked out by `decode_mask`. Leaving rows
only moves `start` (no copy); joining rows and running out of capacity re-lay the buffer.
Position ids are per row (`lengths[b]` for the next token), so padding never shifts RoPE.
"""

import torch
from transformers.cache_utils import Cache, DynamicLayer


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
        self, keys: list[torch.Tensor], values: list[torch.Tensor], start: int, end: int, lengths: list[int]
    ):
        self.keys, self.values = keys, values
        self.start, self.end = start, end
        self.lengths = lengths

    @classmethod
    def empty(
        cls, num_layers: int, kv_heads: int, head_dim: int, capacity: int, dtype, device
    ) -> "BatchKVCache":
        """A one-row cache with room for `capacity` tokens (a request about to be prefilled)."""
        shape = (1, kv_heads, capacity, head_dim)
        keys = [torch.empty(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        values = [torch.empty(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        return cls(keys, values, 0, 0, [0])

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
        self._relayout(capacity)

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

    def keep(self, rows: list[int]) -> None:
        """Keeps only `rows` (in that order); drops the padding columns no remaining row needs."""
        index = torch.tensor(rows, dtype=torch.long, device=self.keys[0].device)
        self.keys = [k.index_select(0, index) for k in self.keys]
        self.values = [v.index_select(0, index) for v in self.values]
        self.lengths = [self.lengths[r] for r in rows]
        if self.lengths:
            self.start = self.end - max(self.lengths)

    def merge(self, others: "list[BatchKVCache]", limit: int) -> None:
        """Appends the rows of `others` (same layers and heads) below these, in order, re-aligning all
        at a common end: one re-lay of the buffer however many caches join."""
        width = max(self.width, *(o.width for o in others))
        capacity = min(max(self.capacity, 2 * width, 64), max(limit, width + 1))
        parts = [c._laid_out(capacity, width) for c in (self, *others)]
        self.keys = [torch.cat(layer) for layer in zip(*(keys for keys, _ in parts), strict=True)]
        self.values = [torch.cat(layer) for layer in zip(*(values for _, values in parts), strict=True)]
        self.start, self.end = 0, width
        self.lengths = [length for c in (self, *others) for length in c.lengths]

    def _laid_out(self, capacity: int, width: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Copies of the live columns right-aligned at column `width` of fresh (B, H, capacity, D) buffers."""
        keys, values = [], []
        for k, v in zip(self.keys, self.values, strict=True):
            shape = (k.shape[0], k.shape[1], capacity, k.shape[3])
            new_k, new_v = k.new_zeros(shape), v.new_zeros(shape)
            new_k[:, :, width - self.width : width] = k[:, :, self.start : self.end]
            new_v[:, :, width - self.width : width] = v[:, :, self.start : self.end]
            keys.append(new_k)
            values.append(new_v)
        return keys, values

    def _relayout(self, capacity: int) -> None:
        width = self.width
        self.keys, self.values = self._laid_out(capacity, width)
        self.start, self.end = 0, width
