"""The torch engine's prefix cache: prompt KV of recent requests, reused by prompts that start alike.

Agent rollouts repeat themselves: every call of a harness starts with the same system prompt and
tools, a GRPO group sends the same first prompt G times, and turn n+1 of a conversation extends
turn n. The decode loop asks `lookup` for the longest cached prefix of a new prompt, copies those
key/value columns into the request's own cache and prefills only the rest (vLLM's automatic prefix
caching does this per block; a handful of whole prompts is enough on CPU). Entries hold keys and
values computed by one policy version: the loop clears the cache when new weights are swapped in,
so a prompt is never continued from another policy's KV.

It does not schedule or sample; `clawgym.inference.batch_loop` owns when to look up and insert.
"""

from collections import OrderedDict
from dataclasses import dataclass

import torch


@dataclass
class PrefixEntry:
    tokens: torch.Tensor  # (n,) int64
    keys: list[torch.Tensor]  # per layer, (1, H_kv, n, D)
    values: list[torch.Tensor]


@dataclass
class PrefixHit:
    length: int  # cached tokens usable as the new prompt's prefix
    entry: PrefixEntry


def common_prefix(a: torch.Tensor, b: torch.Tensor) -> int:
    """Length of the longest common prefix of two 1-d token tensors."""
    n = min(len(a), len(b))
    differs = (a[:n] != b[:n]).nonzero()
    return int(differs[0, 0]) if len(differs) else n


class PrefixCache:
    """Least-recently-used whole-prompt KV entries, at most `max_tokens` tokens in all (0 = off)."""

    def __init__(self, max_tokens: int, min_hit: int = 16) -> None:
        self.max_tokens = max_tokens
        self.min_hit = min_hit  # shorter matches are cheaper to recompute than to copy
        self._entries: OrderedDict[int, PrefixEntry] = OrderedDict()
        self._next_id = 0
        self.tokens = 0  # cached tokens now

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, prompt: list[int]) -> PrefixHit | None:
        """The longest cached prefix of `prompt`, leaving at least its last token to compute (the
        first sampled token needs that position's logits); None below `min_hit` tokens."""
        if not self._entries:
            return None
        query = torch.tensor(prompt, dtype=torch.long)
        best_id, best = -1, 0
        for entry_id, entry in self._entries.items():
            length = common_prefix(query, entry.tokens)
            if length > best:
                best_id, best = entry_id, length
        best = min(best, len(prompt) - 1)
        if best < self.min_hit:
            return None
        self._entries.move_to_end(best_id)
        return PrefixHit(best, self._entries[best_id])

    def wants(self, prompt: list[int]) -> bool:
        """Whether `insert` would store this prompt: the cache is on, holds it, and no entry covers it."""
        if self.max_tokens <= 0 or len(prompt) > self.max_tokens:
            return False
        tokens = torch.tensor(prompt, dtype=torch.long)
        return all(common_prefix(tokens, entry.tokens) < len(prompt) for entry in self._entries.values())

    def insert(self, prompt: list[int], keys: list[torch.Tensor], values: list[torch.Tensor]) -> None:
        """Caches the KV of a fully prefilled prompt (`keys[l]`: (1, H_kv, >= len(prompt), D), copied).
        Entries the new prompt extends are dropped: it covers them; a prompt an entry already covers
        is not stored twice."""
        n = len(prompt)
        if self.max_tokens <= 0 or n > self.max_tokens:
            return
        tokens = torch.tensor(prompt, dtype=torch.long)
        for entry_id, entry in list(self._entries.items()):
            shared = common_prefix(tokens, entry.tokens)
            if shared == n:  # already covered by an equal or longer entry
                self._entries.move_to_end(entry_id)
                return
            if shared == len(entry.tokens):  # the new prompt extends this entry
                self._drop(entry_id)
        entry = PrefixEntry(
            tokens,
            [k[:, :, :n].clone() for k in keys],
            [v[:, :, :n].clone() for v in values],
        )
        self._entries[self._next_id] = entry
        self._next_id += 1
        self.tokens += n
        while self.tokens > self.max_tokens:
            self._drop(next(iter(self._entries)))

    def clear(self) -> None:
        self._entries.clear()
        self.tokens = 0

    def _drop(self, entry_id: int) -> None:
        self.tokens -= len(self._entries.pop(entry_id).tokens)
