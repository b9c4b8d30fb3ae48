"""Training every captured call as its own sample: the per-call baseline (Agent Lightning, rLLM,
slime's agent path), with the tree's loss so the two can be compared token for token.

Owns the mapping of calls onto a `FlatTree` (each call's prompt + output is a root prefix of the
tree) and the per-call loss rows: a call's output tokens carry the loss, its prompt is context.
Each generated (rollout, position) pair is trained once, by the first call of that rollout whose
output holds it, with the pair's summed weighted advantages Σ_paths w·A (A⁺, A⁻ apart) and weight Σ_paths w from
the same `PathTerms` the tree uses. The PPO ratio at a pair is one number (one prefix, one engine
logprob), so the clipped policy term, KL and entropy of per-call training then equal the tree's
exactly, and so do the gradients (tests/rl/test_per_call.py). Value rows are not built: the
baseline is for the policy loss (GRPO). Segments are sequence-packed like `per_path.pack_paths`.
"""

from collections.abc import Iterable, Sequence

import numpy as np
import torch

from clawgym.errors import InvalidArgument
from clawgym.records import Call
from clawgym.rl.packing import LossRows, PackedSequence
from clawgym.rl.per_path import _concat
from clawgym.rl.terms import PathTerms
from clawgym.trajectory.flat import FlatTree


class _Walker:
    """Positions of a token sequence that starts at the root of a `FlatTree`."""

    def __init__(self, flat: FlatTree) -> None:
        self.flat = flat
        self.child = {
            (int(up), int(flat.tokens[s])): n
            for n, (up, s) in enumerate(zip(flat.node_parent.tolist(), flat.node_start.tolist(), strict=True))
        }

    def positions(self, ids: np.ndarray) -> np.ndarray:
        f, out, node, i = self.flat, [], -1, 0
        while i < len(ids):
            n = self.child.get((node, int(ids[i])))
            if n is None:
                raise InvalidArgument(f"a call's tokens leave the tree at token {i} of {len(ids)}")
            start, take = int(f.node_start[n]), min(int(f.node_len[n]), len(ids) - i)
            if not np.array_equal(f.tokens[start : start + take], ids[i : i + take]):
                raise InvalidArgument(
                    f"a call's tokens leave the tree within tokens {i}-{i + take} of {len(ids)}"
                )
            out.append(np.arange(start, start + take))
            node, i = n, i + take
        return np.concatenate(out) if out else np.zeros(0, np.int64)


def call_segments(
    flat: FlatTree, terms: PathTerms, calls: Iterable[Call], dtype: torch.dtype = torch.float32
) -> list[tuple[np.ndarray, np.ndarray, LossRows]]:
    """(tree positions, tokens, loss rows) of every call, in the order given (give each rollout's
    calls in `seq` order: the first call holding a generated pair trains it)."""
    index = {info.id: i for i, info in enumerate(flat.rollouts)}
    U = flat.n_positions
    key = terms.path_rollout[terms.path].astype(np.int64) * U + terms.pos
    keys, inv = np.unique(key, return_inverse=True)
    wa = terms.weight * terms.adv  # signs kept apart, as merge_terms does (terms.py, departure 5)
    wa_pos = np.bincount(inv, np.maximum(wa, 0.0), minlength=len(keys))
    wa_neg = np.bincount(inv, np.minimum(wa, 0.0), minlength=len(keys))
    w = np.bincount(inv, terms.weight, minlength=len(keys))
    first = np.zeros(len(keys), np.int64)
    first[inv[::-1]] = np.arange(len(key))[::-1]  # one representative row per pair
    claimed = np.zeros(len(keys), bool)
    walker = _Walker(flat)

    def f(x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.asarray(x, dtype=np.float64)).to(dtype)

    segments = []
    for call in calls:
        r = index.get(call.rollout_id)
        if r is None:
            raise InvalidArgument(
                f"call {call.seq} of rollout {call.rollout_id!r}: the rollout is not in the tree"
            )
        prompt, output = np.asarray(call.prompt_ids), np.asarray(call.output_ids)
        positions = walker.positions(np.concatenate([prompt, output]))
        slots = np.arange(len(prompt), len(positions))
        k = np.searchsorted(keys, r * U + positions[slots])
        k = np.minimum(k, max(len(keys) - 1, 0))
        hit = (keys[k] == r * U + positions[slots]) & ~claimed[k] if len(keys) else np.zeros(len(slots), bool)
        slots, k = slots[hit], k[hit]
        claimed[k] = True
        row = first[k]
        empty = torch.zeros(0, dtype=dtype)
        rows = LossRows(
            token=torch.from_numpy(slots.astype(np.int64)),
            engine_logprob=f(terms.engine_logprob[row]),
            adv_pos=f(wa_pos[k]),
            adv_neg=f(wa_neg[k]),
            weight=f(w[k]),
            version=torch.from_numpy(terms.version[row].astype(np.int64)),
            temperature=torch.from_numpy(terms.temperature[row].astype(np.float32)),
            seq=torch.from_numpy(terms.call[row].astype(np.int64)),
            value_token=torch.zeros(0, dtype=torch.long),
            returns=empty,
            old_value=empty,
            value_weight=empty,
        )
        segments.append((positions, flat.tokens[positions], rows))
    return segments


def pack_calls(
    flat: FlatTree, terms: PathTerms, calls: Sequence[Call], budget: int | None = None,
    dtype: torch.dtype = torch.float32,
) -> list[PackedSequence]:  # fmt: skip
    """Every call as its own causal segment, packed into sequences of at most `budget` tokens
    (first fit in call order), with the same forward and loss code as tree packing."""
    segments = call_segments(flat, terms, calls, dtype)
    longest = max((len(s[0]) for s in segments), default=0)
    budget = budget or sum(len(s[0]) for s in segments)
    if longest > budget:
        raise InvalidArgument(f"a call of {longest} tokens does not fit the packing budget ({budget})")
    bins: list[list] = [[]]
    used = 0
    for seg in segments:
        if used + len(seg[0]) > budget:
            bins.append([])
            used = 0
        bins[-1].append(seg)
        used += len(seg[0])
    return [_concat(b) for b in bins if b]
