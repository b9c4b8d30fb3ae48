"""Loss terms on a tree: which generated tokens of which rollout paths carry which advantage and weight.

Owns the placement of advantages on a `FlatTree` and the merge of per-path terms into per-token
rows. The estimators themselves are `advantages.py`; tensors and models are `packing.py`/`losses.py`.

How this departs from textbook GRPO/PPO on linear sequences:

1. Paths. A *rollout path* is (rollout r, maximal sequence end e): root → e, where no other
   sequence of r continues below e. A rollout without branches has one path; compaction and
   sub-agents add paths. This is what a linearising trainer would train one sequence at a time.
2. Steps. Along a path of r, the RL steps are r's *generated* positions, in order; context
   tokens (prompts, tool results) are not steps. A rollout's reward applies to every generated
   token of all its calls, branches included (GRPO); for GAE the reward is placed at the last
   generated token of each path and γ, λ discount over generated steps only.
3. Counting once. A generated (rollout, position) pair lying on n_r(u) paths of the same rollout
   (a branch below a generated token) gets weight 1/n_r(u) on each: summed over paths it counts
   once, as the single action it was. With GRPO all its per-path advantages are equal; with GAE
   they differ (different futures) and the sum averages them.
4. Aggregation (weights folded into the terms, so micro-batches just add up):
   "token":    w = 1 / N,              N = number of generated (rollout, position) pairs
   "sequence": w = 1 / (|o_r| · R),    |o_r| = generated tokens of rollout r, R = rollouts with any
   "sum":      w = 1                   (scale it yourself, e.g. Dr. GRPO's constant)
5. Merging (`merge_terms`). Every path through a position sees the same prefix, so the policy's
   new logprob there is one number. Rows with the same position and the same engine logprob
   (hence the same PPO ratio r, and the same TIS weight) merge exactly: for a ratio r shared by
   terms with weighted advantages a_k = w_k A_k,
        Σ_k min(r a_k, clip(r) a_k) = min(r A⁺, clip(r) A⁺) + min(r A⁻, clip(r) A⁻),
   with A⁺ = Σ_{a_k>0} a_k and A⁻ = Σ_{a_k<0} a_k, because for a > 0, min(r a, clip(r) a) =
   a · min(r, clip(r)) and for a < 0 it is a · max(r, clip(r)): both are linear in a within one
   sign. (Mixing signs is not: min(r(a⁺+a⁻), …) ≠ the sum, hence two sums.) Positions generated
   by several rollouts with different engine logprobs (different policy versions) stay separate
   rows, so a ratio taken against the engine is still exact.
6. Temperature. Each row carries the temperature T of its engine logprob (the call's sampling
   temperature; NaN where not recorded): the trainer's π at that row is softmax(logits / T), the
   policy the engine sampled from. Rows at different temperatures never merge.
7. Calls. The tree keeps no call ids; a *call* of rollout r on a path is a maximal run of r's
   generated positions, each the child of the one before (a call's output follows its prompt,
   and the next call's prompt adds at least the template's turn header before its own output).
   Its id is (r, first position, last position), so the paths of r through one call share it.
   Two calls with no context token between them (a reply continued as it was) read as one; a
   run that branches below a generated token (a retried call whose samples began alike, radix
   rule 1) is a different call on each path, sharing its first tokens. A sequence-level
   importance ratio (losses.py) is taken per call or per rollout, so `merge_terms(terms, by)`
   then merges rows only within one call (or rollout): each merged row has exactly one.
"""

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from clawgym.errors import InvalidArgument
from clawgym.rl.advantages import gae, grpo_advantages
from clawgym.trajectory.flat import FlatTree

Aggregation = Literal["token", "sequence", "sum"]


@dataclass(frozen=True)
class PathTerms:
    """One row per (rollout path, generated position of that rollout on the path): K rows, P paths."""

    path_rollout: np.ndarray  # int32 (P,) rollout of each path
    path_node: np.ndarray  # int32 (P,) end node of each path (FlatTree.path_positions)
    path: np.ndarray  # int32 (K,) path of each row
    pos: np.ndarray  # int64 (K,) tree position of the generated token
    adv: np.ndarray  # float64 (K,) advantage on this path
    weight: np.ndarray  # float64 (K,) aggregation weight / n_r(pos) (departures 3-4)
    engine_logprob: np.ndarray  # float32 (K,) engine logprob of the generation
    version: np.ndarray  # int32 (K,) policy version that generated it
    temperature: np.ndarray  # float32 (K,) temperature of the engine logprob (NaN: not recorded)
    call: np.ndarray  # int64 (K,) call of the row's token in the tree (departure 7)
    returns: np.ndarray | None = None  # float64 (K,) value target R = A + V_old (GAE only)
    old_value: np.ndarray | None = None  # float64 (K,) V_old at the row (GAE only)

    def rows_of(self, p: int) -> np.ndarray:
        """Row indices belonging to path p."""
        return np.flatnonzero(self.path == p)


@dataclass(frozen=True)
class TokenTerms:
    """Merged policy rows (departure 5): one row per (position, distinct engine logprob)."""

    pos: np.ndarray  # int64 (C,)
    engine_logprob: np.ndarray  # float32 (C,)
    adv_pos: np.ndarray  # float64 (C,) A⁺ = Σ of positive w·A
    adv_neg: np.ndarray  # float64 (C,) A⁻ = Σ of negative w·A
    weight: np.ndarray  # float64 (C,) Σ w (for KL and entropy terms)
    version: np.ndarray  # int32 (C,) newest policy version among the merged generations
    temperature: np.ndarray  # float32 (C,) temperature of the engine logprob (NaN: not recorded)
    seq: np.ndarray  # int64 (C,) the row's call or rollout with `merge_terms(by=...)`, else -1


@dataclass(frozen=True)
class ValueTerms:
    """Value-loss rows, kept per path (the clipped value loss does not merge): V rows."""

    pos: np.ndarray  # int64 (V,)
    returns: np.ndarray  # float64 (V,)
    old_value: np.ndarray  # float64 (V,)
    weight: np.ndarray  # float64 (V,)


@dataclass(frozen=True)
class _Steps:
    path_rollout: np.ndarray
    path_node: np.ndarray
    path: np.ndarray
    pos: np.ndarray
    rollout: np.ndarray
    weight: np.ndarray
    engine_logprob: np.ndarray
    version: np.ndarray
    temperature: np.ndarray
    call: np.ndarray


def _steps(flat: FlatTree, aggregation: Aggregation) -> _Steps:
    """Every (path, generated position of the path's rollout) in path order, weighted (1-4)."""
    path_rollout, path_node = flat.rollout_paths()
    order = np.lexsort((flat.gen_pos, flat.gen_rollout))
    g_pos, g_r = flat.gen_pos[order].astype(np.int64), flat.gen_rollout[order]
    bounds = np.searchsorted(g_r, np.arange(len(flat.rollouts) + 1))
    paths, rows, runs = [], [], []
    for p, (r, node) in enumerate(zip(path_rollout.tolist(), path_node.tolist(), strict=True)):
        positions = flat.path_positions(node)
        lo, hi = bounds[r], bounds[r + 1]
        idx = np.clip(np.searchsorted(g_pos[lo:hi], positions), 0, max(hi - lo - 1, 0))
        hit = (g_pos[lo:hi][idx] == positions) if hi > lo else np.zeros(positions.shape, bool)
        rows.append(lo + idx[hit])
        paths.append(np.full(int(hit.sum()), p, np.int32))
        runs.append(_call_runs(r, positions, np.flatnonzero(hit)))
    row = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    run_keys = np.concatenate(runs) if runs else np.zeros((0, 3), np.int64)
    call = np.unique(run_keys, axis=0, return_inverse=True)[1].reshape(-1).astype(np.int64)
    n_paths_through = np.bincount(row, minlength=len(g_pos))
    rollout = g_r[row]
    if aggregation == "token":
        agg = np.full(len(row), 1.0 / max(len(g_pos), 1))
    elif aggregation == "sequence":
        per_rollout = np.bincount(g_r, minlength=len(flat.rollouts))
        agg = 1.0 / (per_rollout[rollout] * max(int((per_rollout > 0).sum()), 1))
    elif aggregation == "sum":
        agg = np.ones(len(row))
    else:
        raise InvalidArgument(f"unknown aggregation {aggregation!r} (token, sequence or sum)")
    return _Steps(
        path_rollout=path_rollout,
        path_node=path_node,
        path=np.concatenate(paths) if paths else np.zeros(0, np.int32),
        pos=g_pos[row],
        rollout=rollout,
        weight=agg / n_paths_through[row],
        engine_logprob=flat.gen_logprob[order][row],
        version=flat.gen_version[order][row],
        temperature=flat.gen_temperature[order][row],
        call=call,
    )


def _call_runs(rollout: int, positions: np.ndarray, along: np.ndarray) -> np.ndarray:
    """int64 (n, 3): (rollout, first, last position) of the call of each generated slot `along` a
    path (ascending indices into `positions`): its maximal run of consecutive slots (departure 7)."""
    starts = np.concatenate([[True], np.diff(along) != 1]) if len(along) else np.zeros(0, bool)
    run = np.cumsum(starts) - 1
    ends = np.concatenate([starts[1:], [True]]) if len(along) else starts
    first, last = positions[along[starts]], positions[along[ends]]
    return np.stack([np.full(len(along), rollout), first[run], last[run]], axis=1).astype(np.int64)


def grpo_terms(
    flat: FlatTree,
    *,
    scale_by_std: bool = True,
    leave_one_out: bool = False,
    aggregation: Aggregation = "token",
    eps: float = 1e-6,
) -> PathTerms:
    """GRPO on a tree: each rollout's group-normalised reward on all its generated tokens, every path."""
    s = _steps(flat, aggregation)
    rewards = torch.tensor([r.reward for r in flat.rollouts], dtype=torch.float64)
    groups = {gid: i for i, gid in enumerate(dict.fromkeys(r.group_id for r in flat.rollouts))}
    group = torch.tensor([groups[r.group_id] for r in flat.rollouts], dtype=torch.int64)
    adv = grpo_advantages(rewards, group, scale_by_std=scale_by_std, leave_one_out=leave_one_out, eps=eps)
    return PathTerms(
        path_rollout=s.path_rollout,
        path_node=s.path_node,
        path=s.path,
        pos=s.pos,
        adv=adv.numpy()[s.rollout],
        weight=s.weight,
        engine_logprob=s.engine_logprob,
        version=s.version,
        temperature=s.temperature,
        call=s.call,
    )


def gae_terms(
    flat: FlatTree,
    values: np.ndarray,
    *,
    gamma: float = 1.0,
    lam: float = 0.95,
    aggregation: Aggregation = "token",
) -> PathTerms:
    """PPO-GAE on a tree: GAE along every rollout path over its generated steps (departure 2).

    `values` (U,) is V_old(state before position u), from `packing.values_by_position`; the
    rollout's reward sits on the last generated token of each of its paths.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.shape != (flat.n_positions,):
        raise InvalidArgument(f"values must be ({flat.n_positions},) over tree positions, got {values.shape}")
    s = _steps(flat, aggregation)
    rewards = np.array([r.reward for r in flat.rollouts], dtype=np.float64)
    if not np.isfinite(rewards[s.path_rollout]).all():
        raise InvalidArgument("every rollout needs a finite reward before computing advantages")
    if not np.isfinite(values[s.pos]).all():
        raise InvalidArgument("values are not finite at every generated position")
    adv, ret = np.zeros(len(s.pos)), np.zeros(len(s.pos))
    for p in range(len(s.path_rollout)):
        rows = np.flatnonzero(s.path == p)
        if rows.size == 0:
            continue
        step_rewards = np.zeros(rows.size)
        step_rewards[-1] = rewards[s.path_rollout[p]]
        a, r = gae(torch.from_numpy(step_rewards), torch.from_numpy(values[s.pos[rows]]), gamma, lam)
        adv[rows], ret[rows] = a.numpy(), r.numpy()
    return PathTerms(
        path_rollout=s.path_rollout,
        path_node=s.path_node,
        path=s.path,
        pos=s.pos,
        adv=adv,
        weight=s.weight,
        engine_logprob=s.engine_logprob,
        version=s.version,
        temperature=s.temperature,
        call=s.call,
        returns=ret,
        old_value=values[s.pos],
    )


def merge_terms(terms: PathTerms, by: Literal["call", "rollout"] | None = None) -> TokenTerms:
    """Merge per-path rows into per-(position, engine logprob, temperature) rows with A⁺/A⁻ sums
    (departures 5, 6); with `by`, only rows of one call or one rollout merge (departure 7)."""
    wa = terms.weight * terms.adv
    if by is None:
        seq = np.full(len(terms.pos), -1, np.int64)
    elif by == "call":
        seq = terms.call.astype(np.int64)
    elif by == "rollout":
        seq = terms.path_rollout[terms.path].astype(np.int64)
    else:
        raise InvalidArgument(f"unknown merge level {by!r} (call, rollout or None)")
    bits = terms.engine_logprob.astype(np.float32).view(np.int32)
    t_bits = np.where(np.isnan(terms.temperature), np.float32(np.nan), terms.temperature)
    t_bits = t_bits.astype(np.float32).view(np.int32)  # one NaN pattern: unknown merges with unknown
    order = np.lexsort((t_bits, bits, seq, terms.pos))
    pos, bits, t_bits, seq = terms.pos[order], bits[order], t_bits[order], seq[order]
    wa, w = wa[order], terms.weight[order]
    if len(pos) == 0:
        z = np.zeros(0)
        f32 = z.astype(np.float32)
        return TokenTerms(pos.astype(np.int64), f32, z, z, z, z.astype(np.int32), f32, seq)
    same = (
        (pos[1:] == pos[:-1]) & (bits[1:] == bits[:-1]) & (t_bits[1:] == t_bits[:-1]) & (seq[1:] == seq[:-1])
    )
    first = np.flatnonzero(np.concatenate([[True], ~same]))
    return TokenTerms(
        pos=pos[first].astype(np.int64),
        engine_logprob=terms.engine_logprob[order][first].astype(np.float32),
        adv_pos=np.add.reduceat(np.maximum(wa, 0.0), first),
        adv_neg=np.add.reduceat(np.minimum(wa, 0.0), first),
        weight=np.add.reduceat(w, first),
        version=np.maximum.reduceat(terms.version[order], first).astype(np.int32),
        temperature=terms.temperature[order][first].astype(np.float32),
        seq=seq[first],
    )


def value_terms(terms: PathTerms) -> ValueTerms:
    """The value-loss rows of GAE terms (one per path and generated step)."""
    if terms.returns is None or terms.old_value is None:
        raise InvalidArgument("value terms need GAE terms (returns and old values)")
    return ValueTerms(pos=terms.pos, returns=terms.returns, old_value=terms.old_value, weight=terms.weight)
