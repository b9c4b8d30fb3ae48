"""One optimizer step on a rank's trees: advantages → packed micro-batches → gradient accumulation.

Owns the update as CleanRL's `ppo.py` reads: (1) place advantages on each tree (GRPO, or GAE over
values from a no-grad pass), (2) pack trees into micro-batches of at most `micro_batch_tokens`,
(3) for each epoch: forward/backward every micro-batch, clip the global gradient norm, step.
It does not choose groups (`batch.py`) or write checkpoints (`checkpoint.py`).

How this departs from single-process CleanRL, numbered:
1. The loss normaliser is global. Each tree's terms are built with its own aggregation weights
   (`clawgym.rl.terms`), then rescaled by (tree count / batch count) of generated tokens ("token")
   or rollouts ("sequence"), so the micro-batch losses of all ranks sum to the batch's loss.
2. FSDP2 averages gradients over ranks, so each rank's loss is multiplied by the world size
   (distributed.py, rule 2), and ranks with fewer micro-batches run zero-weighted dummies (rule 1).
3. The trainer's logprobs at the engine's tokens are compared with the engine's own in the first
   forward of the step (π_old = π_θ there): `logprob_mismatch` = weighted mean |Δ logprob|.
4. A call- or rollout-level correction (`algorithm.off_policy`) needs ρ_s over every row of a
   sequence before the first backward: π_old comes from a no-grad pass over all packs (as for
   several epochs), and the sequences' ratios are reported as `off_policy_*`.
5. PPO's critic gets steps of its own (`fit_values`): `value_epochs` optimizer steps of the value
   head alone after the update, on the hidden states its first forward computed, and in the first
   `value_warmup_steps` RL steps only those (the policy frozen). `explained_variance` is V_old's (the
   values the advantages used) against the batch's returns, over all the batch's value rows at once.
6. A step may train while it waits at the staleness bound (`trainer.max_groups_per_step`): `fill`
   gives rounds of trees, packed with the first round's normaliser, whose backward adds to the first
   epoch's gradient before the optimizer steps. The gradient and the summed diagnostics are then
   multiplied by that normaliser over the whole step's (`Normaliser.ratio`): every term is linear in
   its rows' weights, so this is the update of one batch of all the trees. PPO's whitening needs the
   whole batch first, so a whitened PPO step never fills.
7. A rank's trees are packed as one tree (`trainer.merge_group_trees`): the prefix every group of the
   step shares (a harness's system prompt and tools) is computed once, not once per group. The rows,
   their advantages (per group) and normalised weights are the per-tree ones, so the gradient is too.
"""

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from torch import Tensor

from clawgym.rl import combine_diagnostics, gae_terms, grpo_terms, merge_terms, pack, rows_loss
from clawgym.rl.losses import (
    LossConfig,
    explained_variance,
    off_policy_counts,
    off_policy_metrics,
    sequence_ratios,
    value_loss,
    value_moments,
)
from clawgym.rl.packing import PackedSequence
from clawgym.rl.terms import PathTerms, value_terms
from clawgym.trainer.batch import GroupTree, merged_tree
from clawgym.trainer.config import AlgorithmConfig
from clawgym.trainer.distributed import World, full_tensor
from clawgym.trainer.policy import PolicyModule, dummy_pack, value_slots


@dataclass(frozen=True)
class Normaliser:
    """The batch-wide counts the loss is normalised by (departure 1)."""

    generated: int  # Σ over trees of generated (rollout, position) pairs
    rollouts: int  # Σ over trees of rollouts with a generated token

    @classmethod
    def of(cls, trees: list[GroupTree]) -> "Normaliser":
        return cls(sum(t.n_generated for t in trees), sum(t.n_generating_rollouts for t in trees))

    def scale(self, tree: GroupTree, aggregation: str) -> float:
        if aggregation == "token":
            return tree.n_generated / max(self.generated, 1)
        if aggregation == "sequence":
            return tree.n_generating_rollouts / max(self.rollouts, 1)
        return 1.0

    def ratio(self, whole: "Normaliser", aggregation: str) -> float:
        """This (a step's first round's) normaliser over the whole step's: what a gradient built with
        this one is multiplied by to be the whole step's."""
        if aggregation == "token":
            return self.generated / max(whole.generated, 1)
        if aggregation == "sequence":
            return self.rollouts / max(whole.rollouts, 1)
        return 1.0


# --- 1-2. advantages on trees, packed into micro-batches ---


def prepare_packs(
    policy: PolicyModule,
    trees: list[GroupTree],
    algo: AlgorithmConfig,
    norm: Normaliser,
    budget: int,
    world: World,
    merge: bool = True,
) -> list[PackedSequence]:
    """This rank's micro-batches with their loss rows, advantages placed and globally normalised.
    With `merge` the trees that train are packed as one (`batch.merged_tree`, departure 7)."""
    known: dict[int, PathTerms] = {}  # GRPO: the terms the signal check computed, by id of their tree
    if algo.name != "ppo":
        known = {id(t): terms for t in trees if has_gradient(terms := _terms(t, algo), algo)}
        trees = [t for t in trees if id(t) in known]
    if merge and len(trees) > 1:
        trees = [merged_tree(trees)]
    values = _old_values(policy, trees, budget, world) if algo.name == "ppo" else [None] * len(trees)
    placed: list[tuple[GroupTree, PathTerms]] = []
    for tree, v in zip(trees, values, strict=True):
        terms = known[id(tree)] if id(tree) in known else _terms(tree, algo, v)
        terms = _fresh(terms, tree.trained_from)
        placed.append((tree, _rescaled(terms, norm.scale(tree, algo.aggregation))))
    if algo.name == "ppo" and algo.whiten_advantages:
        placed = whitened(placed, world)
    packs: list[PackedSequence] = []
    by = algo.loss_config().sequence_level
    offset = 0  # sequence ids are per tree: made distinct over the rank's trees
    for tree, terms in placed:
        vt = value_terms(terms) if algo.name == "ppo" else None
        merged = merge_terms(terms, by)
        if by is not None:
            merged = dataclasses.replace(merged, seq=merged.seq + offset)
            offset = int(merged.seq.max()) + 1 if len(merged.seq) else offset
        packs += pack(tree.flat, budget, merged, vt)
    return packs


def whitened(
    placed: list[tuple[GroupTree, PathTerms]], world: World, eps: float = 1e-6
) -> list[tuple[GroupTree, PathTerms]]:
    """The advantages of every tree shifted and scaled to weighted mean 0 and std 1 over the whole
    batch: the loss weights of all ranks' rows, so each rank whitens as one process would. PPO's
    advantages (R - V along a path) otherwise carry the rewards' scale, a tenth or less of GRPO's
    group-normalised ones on sparse rewards; the value targets (`returns`) are left as they were."""
    moments = np.zeros(3)  # Σw, Σw·a, Σw·a²
    for _, t in placed:
        moments += (t.weight.sum(), (t.weight * t.adv).sum(), (t.weight * t.adv**2).sum())
    total, first, second = np.sum(world.gather(moments), axis=0)
    if total <= 0:
        return placed
    mean = first / total
    std = float(np.sqrt(max(second / total - mean**2, 0.0)))
    return [(tree, dataclasses.replace(t, adv=(t.adv - mean) / (std + eps))) for tree, t in placed]


def _terms(tree: GroupTree, algo: AlgorithmConfig, values: np.ndarray | None = None) -> PathTerms:
    """The tree's per-path terms: GAE over `values` (PPO), else GRPO's group-normalised rewards."""
    if algo.name == "ppo":
        return gae_terms(tree.flat, values, gamma=algo.gamma, lam=algo.lam, aggregation=algo.aggregation)
    return grpo_terms(
        tree.flat,
        scale_by_std=algo.scale_by_std,
        leave_one_out=algo.leave_one_out,
        aggregation=algo.aggregation,
    )


def has_gradient(terms: PathTerms, algo: AlgorithmConfig) -> bool:
    """False for a GRPO group whose rollouts all got the same reward, when no KL or entropy term is
    in the loss: every row's advantage is 0, so its forward and backward would add exactly nothing
    to the gradient. Skipping it leaves the gradient as it was (the normaliser still counts its
    tokens); diagnostics (entropy, clip fraction, kl_ref) are then those of the trained groups, and a
    step with no such group reports loss 0 and no entropy or KL. The optimizer still steps then
    (`_zero_missing_grads`), so momentum and its step count are those of the unskipped update."""
    return bool(np.any(terms.adv != 0)) or algo.kl_coef > 0 or algo.entropy_coef > 0


def _fresh(terms: PathTerms, trained_from: int) -> PathTerms:
    """The terms with no loss on tokens generated before version `trained_from` (`stale_calls: mask`):
    their rows keep their place in the tree and in the normaliser, as a masked call's do."""
    if trained_from <= 0 or terms.version.min(initial=trained_from) >= trained_from:
        return terms
    return dataclasses.replace(terms, weight=np.where(terms.version < trained_from, 0.0, terms.weight))


def _rescaled(terms: PathTerms, scale: float) -> PathTerms:
    return dataclasses.replace(terms, weight=terms.weight * scale)


@torch.no_grad()
def _old_values(policy: PolicyModule, trees: list[GroupTree], budget: int, world: World) -> list[np.ndarray]:
    """V_old(prefix before u) at every position of every tree (NaN at depth 0), in lockstep across ranks."""
    layouts = [(i, p) for i, tree in enumerate(trees) for p in pack(tree.flat, budget)]
    out = [np.full(tree.flat.n_positions, np.nan) for tree in trees]
    for k in range(world.max_int(len(layouts))):
        if k >= len(layouts):
            policy(dummy_pack(), mode="values")
            continue
        i, p = layouts[k]
        (v,) = policy(p, mode="values")
        out[i][p.tree_pos[value_slots(p)].numpy()] = v.double().cpu().numpy()
    return out


@torch.no_grad()
def _rows_logprobs(module: PolicyModule, packs: list[PackedSequence], world: World) -> list[Tensor]:
    """logπ at every pack's rows before the update (π_old, or the reference's), in lockstep."""
    out = []
    for k in range(world.max_int(len(packs))):
        logprob, _, _ = module(packs[k] if k < len(packs) else dummy_pack())
        if k < len(packs):
            out.append(logprob)
    return out


# --- 3. the update ---


class Fill(Protocol):
    """More trees for a step that trains while it waits at the staleness bound (`loop._Fill`):
    every rank calls `next_packs` in lockstep until it returns None; `rescale` is then the first
    round's normaliser over the whole step's, the factor that makes the accumulated gradient the
    step's (every loss term is linear in the rows' weights)."""

    def next_packs(self) -> list[PackedSequence] | None: ...

    def rescale(self) -> float: ...


@dataclass(frozen=True)
class _Round:
    """Packs added to a step at once, with what their loss needs from before the update: π_old
    (several epochs, or sequence-level ratios), the reference's logprobs and the sequences' ρ_s."""

    packs: list[PackedSequence]
    old: list[Tensor] | None
    ref: list[Tensor] | None
    seq_ratio: list[Tensor] | None

    @classmethod
    def of(
        cls,
        packs: list[PackedSequence],
        policy: PolicyModule,
        reference: PolicyModule | None,
        algo: AlgorithmConfig,
        world: World,
    ) -> "_Round":
        by_sequence = algo.loss_config().sequence_level is not None
        old = _rows_logprobs(policy, packs, world) if algo.epochs > 1 or by_sequence else None
        seq_ratio = sequence_ratios([p.rows for p in packs], old) if by_sequence and old is not None else None
        # the reference's logprobs: for the KL term (kl_coef > 0) or only to measure kl_ref (kl_diagnostic)
        ref = (
            _rows_logprobs(reference, packs, world)
            if reference is not None and algo.needs_reference
            else None
        )
        return cls(packs, old, ref, seq_ratio)


def update(
    policy: PolicyModule,
    optimizer: torch.optim.Optimizer,
    packs: list[PackedSequence],
    algo: AlgorithmConfig,
    world: World,
    policy_version: int,
    reference: PolicyModule | None = None,
    value_only: bool = False,
    fill: Fill | None = None,
) -> dict[str, float]:
    """`algo.epochs` optimizer steps on this rank's packs, then `algo.value_epochs` of the value head
    alone; with `value_only` (a value warm-up step) only the latter, at least one. With `fill`, the
    first epoch's gradient also accumulates the rounds it gives before the step (departure 6). The
    batch's diagnostics (same on every rank)."""
    if value_only:
        critic = _critic_figures(packs, world) if policy.value_head is not None else {}
        return critic | _value_only_update(policy, optimizer, packs, algo, world)
    cfg = algo.loss_config()
    fit = policy.value_head is not None and algo.value_epochs > 0
    features: list[Tensor] = []
    rounds: list[_Round] = []
    scale = 1.0  # the first round's normaliser over the step's (fill), else 1
    # The optimizer's parameters, not `policy.parameters()`: after a no-grad forward FSDP2 may leave the
    # root's parameters unsharded, and those tensors are not the ones that receive the gradients.
    params = [p for group in optimizer.param_groups for p in group["params"]]
    for epoch in range(algo.epochs):
        optimizer.zero_grad(set_to_none=True)
        parts: list[dict[str, float]] = []
        forwards = 0
        for rnd in _first_rounds(packs, fill, policy, reference, algo, world) if epoch == 0 else rounds:
            if epoch == 0:
                rounds.append(rnd)
            n_steps = world.max_int(len(rnd.packs))
            forwards += n_steps
            for k in range(n_steps):
                real = k < len(rnd.packs)
                p = rnd.packs[k] if real else dummy_pack()
                keep = fit and epoch == 0
                out = policy(p, mode="rows+features" if keep else "rows", entropy_grad=algo.entropy_coef > 0)
                logprob, entropy, values = out[:3]
                if keep and real:
                    features.append(out[3])
                rows = p.rows.to(logprob.device, logprob.dtype)
                loss, diagnostics = rows_loss(
                    logprob,
                    entropy,
                    values if policy.value_head is not None else None,
                    rows,
                    cfg,
                    old_logprob=rnd.old[k] if rnd.old is not None and real else None,
                    ref_logprob=rnd.ref[k] if rnd.ref is not None and real else None,
                    policy_version=policy_version,
                    seq_ratio=rnd.seq_ratio[k] if rnd.seq_ratio is not None and real else None,
                )
                if real:
                    parts.append(diagnostics)
                (loss * (world.size if real else 0.0)).backward()
        if epoch == 0 and fill is not None:
            scale = fill.rescale()
        if forwards == 0:  # no group had signal on any rank: AdamW still steps, as if on their zero gradient
            _zero_missing_grads(params)
        if scale != 1.0:
            for p in params:
                if p.grad is not None:
                    p.grad.mul_(scale)
        grad_norm = float(full_tensor(torch.nn.utils.clip_grad_norm_(params, algo.max_grad_norm)))
        if np.isfinite(grad_norm):
            optimizer.step()
        # freed now, not at the next step: between updates the rollouts need that memory (a copy of
        # the weights); a NaN/inf gradient is dropped unused, as it would poison every later step
        optimizer.zero_grad(set_to_none=True)
    all_packs = [p for rnd in rounds for p in rnd.packs]
    critic = _critic_figures(all_packs, world) if policy.value_head is not None else {}
    combined = combine_diagnostics([d for d in world.gather(combine_diagnostics(parts)) if d])
    combined |= {k: v * scale for k, v in combined.items() if k in _SCALED_SUMS}
    if cfg.sequence_level is not None:
        counts = [_round_counts(rnd, cfg) for rnd in rounds]
        combined |= off_policy_metrics(world.gather(_summed_counts(counts)))
    if fit:
        rows = ValueRows.of(all_packs, features)
        rows = dataclasses.replace(rows, weight=rows.weight * scale)
        fitted = fit_values(policy, optimizer, rows, algo, world, algo.value_epochs)
        critic |= {"value_fit_loss": fitted["value_fit_loss"]}
    # Skipped groups add exactly 0 to the loss; entropy and KL are measured only on trained groups.
    return {"loss": 0.0} | _stable_names(combined) | {"grad_norm": grad_norm} | critic


def _first_rounds(
    packs: list[PackedSequence],
    fill: Fill | None,
    policy: PolicyModule,
    reference: PolicyModule | None,
    algo: AlgorithmConfig,
    world: World,
) -> Iterator[_Round]:
    """The step's packs, then each round `fill` adds, as it comes (before the optimizer steps)."""
    yield _Round.of(packs, policy, reference, algo, world)
    while fill is not None and (more := fill.next_packs()) is not None:
        yield _Round.of(more, policy, reference, algo, world)


# Diagnostics that sum the rows' weighted terms: the fill's rescale applies to them as to the gradient.
_SCALED_SUMS = ("loss", "policy_loss", "kl_ref", "value_loss")


def _round_counts(rnd: _Round, cfg: LossConfig) -> np.ndarray:
    """`off_policy_counts` of one round's packs (none: zero sequences)."""
    seq = torch.cat([p.rows.seq for p in rnd.packs]) if rnd.packs else torch.zeros(0, dtype=torch.long)
    ratios = torch.cat([r.cpu() for r in rnd.seq_ratio]) if rnd.packs else torch.zeros(0)
    return off_policy_counts(seq, ratios, cfg)


def _summed_counts(counts: list[np.ndarray]) -> np.ndarray:
    """One rank's `off_policy_counts` over a step's rounds (their sequences are distinct)."""
    stacked = np.stack(counts)
    return np.concatenate([stacked[:, :5].sum(axis=0), [stacked[:, 5].max()]])


# --- 5. the critic's own steps ---


@dataclass(frozen=True)
class ValueRows:
    """A rank's value rows, for steps of the value head alone: the hidden state each V reads
    (detached, from a forward of the weights before the update), the targets and the loss weights."""

    features: Tensor  # (N, H)
    returns: Tensor  # (N,)
    old_value: Tensor  # (N,)
    weight: Tensor  # (N,)

    @classmethod
    def of(cls, packs: list[PackedSequence], features: list[Tensor]) -> "ValueRows":
        if not packs:
            return cls(torch.zeros(0, 0), torch.zeros(0), torch.zeros(0), torch.zeros(0))
        f = torch.cat(features)
        rows = [p.rows.to(f.device, f.dtype) for p in packs]
        return cls(
            features=f,
            returns=torch.cat([r.returns for r in rows]),
            old_value=torch.cat([r.old_value for r in rows]),
            weight=torch.cat([r.value_weight for r in rows]),
        )


def fit_values(
    policy: PolicyModule,
    optimizer: torch.optim.Optimizer,
    rows: ValueRows,
    algo: AlgorithmConfig,
    world: World,
    passes: int,
) -> dict[str, float]:
    """`passes` optimizer steps of the value head alone on `rows` (c_v L_v of losses.py, clipped around
    V_old as the update's own value loss is); the language model gets no gradient, so the optimizer
    leaves its weights and moments as they are. Reports the value loss over the batch after the last
    pass (`value_fit_loss`: in-sample, against `value_loss` before). Every rank runs `passes` + 1
    head forwards, in lockstep."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    head = policy.value_head.proj.weight  # (1, H)
    features = rows.features
    if features.numel() == 0:  # a rank with no rows still runs the passes (FSDP2's collectives)
        features = torch.zeros(0, head.shape[-1])
    features = features.to(head.device, head.dtype)
    losses = []
    for i in range(passes + 1):
        last = i == passes
        with torch.set_grad_enabled(not last):
            (v,) = policy(None, mode="head", features=features)
            target = rows.returns.to(v)
            loss = (rows.weight.to(v) * value_loss(v, rows.old_value.to(v), target, algo.value_clip)).sum()
        losses.append(float(loss.detach()))
        if last:
            break
        optimizer.zero_grad(set_to_none=True)
        (loss * algo.value_coef * world.size).backward()
        norm = float(full_tensor(torch.nn.utils.clip_grad_norm_(params, algo.max_grad_norm)))
        if np.isfinite(norm):
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    total = np.sum(world.gather(np.array(losses)), axis=0)
    return {"value_loss_before_fit": float(total[0]), "value_fit_loss": float(total[-1])}


def _value_only_update(
    policy: PolicyModule,
    optimizer: torch.optim.Optimizer,
    packs: list[PackedSequence],
    algo: AlgorithmConfig,
    world: World,
) -> dict[str, float]:
    """A value warm-up step: one no-grad forward of the batch for the hidden states, then
    max(`value_epochs`, 1) steps of the value head alone; the policy's weights stay as they were."""
    features = []
    for k in range(world.max_int(len(packs))):
        (f,) = policy(packs[k] if k < len(packs) else dummy_pack(), mode="features")
        if k < len(packs):
            features.append(f)
    fitted = fit_values(
        policy, optimizer, ValueRows.of(packs, features), algo, world, max(algo.value_epochs, 1)
    )
    before = fitted.pop("value_loss_before_fit")  # the head as GAE used it: the step's value loss
    return {"loss": algo.value_coef * before, "value_loss": before, "value_warmup": 1.0} | fitted


def _critic_figures(packs: list[PackedSequence], world: World) -> dict[str, float]:
    """`explained_variance` of V_old (the values GAE used) over every rank's value rows."""
    moments = np.zeros(5)
    for p in packs:
        moments += value_moments(p.rows.returns, p.rows.old_value, p.rows.value_weight)
    ev = explained_variance(np.sum(world.gather(moments), axis=0))
    return {} if ev is None else {"explained_variance": ev}


def _zero_missing_grads(params: list[Tensor]) -> None:
    """Zero gradients where none were computed, so that the optimizer's step count, momentum decay and
    parameters move exactly as they would have after a forward and backward of advantage-0 groups."""
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)


# Per-micro-batch bookkeeping of `combine_diagnostics`, not step diagnostics; the step's policy lag is
# computed from the batch (loop.py).
_NOT_STEP_KEYS = ("weight", "rows", "ratio_mean", "policy_lag")


def _stable_names(d: dict[str, float]) -> dict[str, float]:
    """The step's diagnostics under the names they keep everywhere (metrics.STEP_KEYS, Prometheus)."""
    return {k: float(v) for k, v in d.items() if k not in _NOT_STEP_KEYS}
