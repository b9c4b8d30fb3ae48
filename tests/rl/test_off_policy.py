"""Sequence-level off-policy correction on trees: a call's (or rollout's) geometric-mean ratio
ρ_s = exp(mean over its own generated tokens of logπ_old - logπ_engine), truncated or used as a
band mask, gives the same loss and gradients tree-packed (each shared prefix computed once, split
into micro-batches) as a per-path reference written out by hand from the store's call records.

The group's three rollouts were served by three policy versions, as a trainer running ahead of
its engines sees them: rollout 0 by v4 (the weights being trained), rollout 1 by v4 then v3,
rollout 2 by v2 and v3, one of its calls switching from v2 to v3 mid-call (weights loaded while it
generated), and a compaction that branches its history. Each version is the tiny model with its
own perturbation; the engine logprob of a token is that version's, recorded per token in float32
with its version, as `clawgym.records.Call` holds it. Token ids: 1-6 system prompt, 7-9 task,
10 the assistant header, 20-29 tool results, 30-31 a compaction summary, 11-19 and 32-47 outputs.
"""

import math
from collections import Counter

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen3Config

from clawgym.records import Call, Group, Rollout, RolloutWithCalls
from clawgym.rl import grpo_terms, merge_terms, pack, tree_loss
from clawgym.rl.forward import old_logprobs
from clawgym.rl.losses import off_policy_counts, off_policy_metrics, off_policy_weight, sequence_ratios
from clawgym.trainer.config import AlgorithmConfig
from clawgym.trajectory import tree_from_group

SYSTEM, TASK, HEADER = [1, 2, 3, 4, 5, 6], [7, 8, 9], [10]
CURRENT = 4
PERTURBATION = {4: 0.0, 3: 0.003, 2: 0.08}  # how far each version's weights are from the trained ones
REWARDS = [1.0, 0.0, 0.5]
# The band: v4 and v3 calls fall inside (|log ρ_s| < 0.02 here), v2's outside (> 0.15); asserted below.
BAND = (math.exp(-0.08), math.exp(0.08))
TOL = 1e-6


def tiny_model() -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = Qwen3Config(
        vocab_size=48, hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=12, max_position_embeddings=256,
    )  # fmt: skip
    cfg._attn_implementation = "sdpa"
    return AutoModelForCausalLM.from_config(cfg, dtype=torch.float64).eval()


def version_models(model: torch.nn.Module) -> dict[int, torch.nn.Module]:
    """The weights each version had: the trained model, and copies moved by PERTURBATION."""
    out = {}
    for v, scale in PERTURBATION.items():
        m = tiny_model()
        m.load_state_dict(model.state_dict())
        g = torch.Generator().manual_seed(v)
        with torch.no_grad():
            for p in m.parameters():
                p.add_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))
        out[v] = m
    return out


@torch.no_grad()
def token_logprobs(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    """log π(ids[t] | ids[:t]) for t >= 1 under `model`'s plain causal forward: (len(ids) - 1,)."""
    logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].double(), dim=-1)
    return logp[:-1].gather(-1, torch.tensor(ids[1:])[:, None]).squeeze(-1)


def make_call(
    rollout: str, seq: int, prompt: list[int], output: list[int], versions: list[int], models
) -> Call:
    """A call as the store records it: per-token engine logprobs (float32) of the version that sampled each."""
    full = prompt + output
    lps = [float(token_logprobs(models[v], full)[len(prompt) - 1 + i]) for i, v in enumerate(versions)]
    return Call(
        rollout_id=rollout, seq=seq, protocol="anthropic", request={}, response={},
        prompt_ids=np.array(prompt, np.int32), output_ids=np.array(output, np.int32),
        output_logprobs=np.array(lps, np.float32), output_versions=np.array(versions, np.int32),
        policy_version=max(versions), finish_reason="end_turn",
    )  # fmt: skip


def calls_of_group(models) -> list[list[Call]]:
    """Three rollouts; rollouts 0 and 1 both open with outputs 11, 12 at v4 (equal engine logprobs,
    which token-level merging would merge into one row across rollouts)."""
    rollouts = []
    # rollout 0: v4 throughout, history growing
    p0 = SYSTEM + TASK + HEADER
    o0 = [11, 12, 13, 14]
    p1 = p0 + o0 + [20, 21] + HEADER
    o1 = [15, 16, 17]
    p2 = p1 + o1 + [22, 23] + HEADER
    o2 = [18, 19]
    rollouts.append([("r0", p0, o0, [4] * 4), ("r0", p1, o1, [4] * 3), ("r0", p2, o2, [4] * 2)])
    # rollout 1: v4, then v3 (the trainer published while it ran)
    o0 = [11, 12, 32, 33]
    p1 = p0 + o0 + [24] + HEADER
    o1 = [34, 35, 36]
    p2 = p1 + o1 + [25, 26] + HEADER
    o2 = [37, 38, 39]
    rollouts.append([("r1", p0, o0, [4] * 4), ("r1", p1, o1, [3] * 3), ("r1", p2, o2, [3] * 3)])
    # rollout 2: v2, a call switching v2 -> v3 mid-call, then a compaction (history rewritten) at v3
    o0 = [40, 41, 42]
    p1 = p0 + o0 + [27] + HEADER
    o1 = [43, 44, 45, 46]
    p2 = [*SYSTEM, 30, 31, *HEADER]
    o2 = [47, 13, 14]
    p3 = p2 + o2 + [28, 29] + HEADER
    o3 = [15, 40]
    rollouts.append(
        [
            ("r2", p0, o0, [2] * 3),
            ("r2", p1, o1, [2, 2, 3, 3]),
            ("r2", p2, o2, [3] * 3),
            ("r2", p3, o3, [3] * 2),
        ]
    )
    return [[make_call(r, i, p, o, v, models) for i, (r, p, o, v) in enumerate(calls)] for calls in rollouts]


def group_of(calls: list[list[Call]]) -> Group:
    def rollout(i: int) -> Rollout:
        return Rollout(
            id=f"r{i}", run_id="run", group_id="g", task_id="t", harness="reference", status="done",
            reward=REWARDS[i], passed=REWARDS[i] == 1.0, error="", policy_version_start=2, sandbox="",
            timings={}, created_at=0.0,
        )  # fmt: skip

    return Group("g", "run", [RolloutWithCalls(rollout(i), c) for i, c in enumerate(calls)])


# --- the reference, by hand from the call records ---


def hand_ratios(model, calls: list[list[Call]]) -> dict[tuple[int, int], float]:
    """ρ_s of each call (r, seq): exp of the mean over its output tokens of logπ_old - logπ_engine,
    π_old from the call's own prompt + output through the plain causal forward."""
    out = {}
    for r, rollout in enumerate(calls):
        for c in rollout:
            full = c.prompt_ids.tolist() + c.output_ids.tolist()
            old = token_logprobs(model, full)[len(c.prompt_ids) - 1 :]
            out[(r, c.seq)] = math.exp(float((old - torch.from_numpy(c.output_logprobs).double()).mean()))
    return out


def hand_paths(calls: list[list[Call]]) -> list[tuple[int, list[int], list[tuple[int, int, int]]]]:
    """Each rollout path: (rollout, its tokens, [(index in the path, call seq, index in the call's output)]).
    A call's sequence ends a path unless a later call of the rollout starts with it."""
    paths = []
    for r, rollout in enumerate(calls):
        seqs = [c.prompt_ids.tolist() + c.output_ids.tolist() for c in rollout]
        for k, s in enumerate(seqs):
            if any(t[: len(s)] == s and j > k for j, t in enumerate(seqs)):
                continue
            gen = []
            for c, sc in zip(rollout, seqs, strict=True):
                if s[: len(sc)] == sc:  # this call's output lies on the path
                    gen += [(len(c.prompt_ids) + i, c.seq, i) for i in range(len(c.output_ids))]
            paths.append((r, s, gen))
    return paths


def reference(model, calls, cfg, mode: str) -> tuple[float, dict[str, torch.Tensor]]:
    """GRPO, token aggregation, each path through HF's causal forward, the correction written out:
    ρ' = min(ρ_tok, C) | min(ρ_s, C) | 1[L <= ρ_s <= H] min(ρ_tok, C); masked rows lose entropy too."""
    rewards = torch.tensor(REWARDS, dtype=torch.float64)
    adv = (rewards - rewards.mean()) / (rewards.std(unbiased=False) + 1e-6)
    n_tokens = sum(len(c.output_ids) for rollout in calls for c in rollout)  # each (rollout, token) once
    w = 1.0 / n_tokens
    ratio_of = hand_ratios(model, calls)
    if mode.startswith("rollout_"):  # a rollout's ρ_s: the mean over all its calls' tokens
        for r, rollout in enumerate(calls):
            diffs = []
            for c in rollout:
                full = c.prompt_ids.tolist() + c.output_ids.tolist()
                old = token_logprobs(model, full)[len(c.prompt_ids) - 1 :]
                diffs.append(old - torch.from_numpy(c.output_logprobs).double())
            rho = math.exp(float(torch.cat(diffs).mean()))
            ratio_of.update({(r, c.seq): rho for c in rollout})
    model.zero_grad(set_to_none=True)
    total = 0.0
    for r, ids, gen in hand_paths(calls):
        logp_all = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].double(), dim=-1)
        for at, seq, i in gen:
            call = calls[r][seq]
            logp = logp_all[at - 1, ids[at]]
            entropy = -(logp_all[at - 1].exp() * logp_all[at - 1]).sum()
            rho_tok = min(math.exp(float(logp.detach()) - float(call.output_logprobs[i])), cfg.tis_cap)
            rho_s = ratio_of[(r, seq)]
            keep = 1.0
            if mode == "token_tis":
                weight = rho_tok
            elif mode.endswith("_geo_tis"):
                weight = min(rho_s, cfg.tis_cap)
            else:
                keep = float(BAND[0] <= rho_s <= BAND[1])
                weight = keep * rho_tok
            ratio = torch.exp(logp - logp.detach())  # 1, with the gradient of logπ: the first epoch
            a = float(adv[r]) * w
            surrogate = torch.min(ratio * a, ratio.clamp(1 - cfg.clip_low, 1 + cfg.clip_high) * a)
            loss = -weight * surrogate - cfg.entropy_coef * keep * w * entropy
            loss.backward(retain_graph=True)
            total += float(loss)
    return total, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


# --- the tree, as the trainer packs it ---


def packed(model, calls, cfg, budget):
    """Packs of the group's tree with rows merged per call (or rollout), π_old from a no-grad pass
    over every pack, ρ_s across packs, then tree_loss per micro-batch; (loss, grads, packs, ratios)."""
    flat = tree_from_group(group_of(calls)).flatten()
    terms = merge_terms(grpo_terms(flat), cfg.sequence_level)
    packs = pack(flat, budget, terms, dtype=torch.float64)
    old = [old_logprobs(model, p) for p in packs]
    ratios = sequence_ratios([p.rows for p in packs], old) if cfg.sequence_level else [None] * len(packs)
    model.zero_grad(set_to_none=True)
    total = 0.0
    for p, o, rho in zip(packs, old, ratios, strict=True):
        loss, _ = tree_loss(model, p, cfg, old_logprob=o, seq_ratio=rho)
        loss.backward()
        total += float(loss)
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return total, grads, packs, old, ratios, flat


def loss_config(mode: str):
    return AlgorithmConfig(
        off_policy=mode, tis_cap=1.02, geo_mask_low=BAND[0], geo_mask_high=BAND[1], entropy_coef=0.01
    ).loss_config()


@pytest.fixture(scope="module")
def setup():
    model = tiny_model()
    calls = calls_of_group(version_models(model))
    return model, calls


def test_the_group_spans_three_versions_and_the_band_splits_the_calls(setup):
    """Test setup: three versions served the group, ρ_s = 1 for v4 calls, and the band keeps the v3
    calls and drops the v2 ones with a clear margin (a failure here means the fixture drifted)."""
    model, calls = setup
    versions = {int(v) for rollout in calls for c in rollout for v in c.output_versions}
    assert versions == {2, 3, 4}, f"three versions must have served the group, got {versions}"
    for (r, seq), rho in hand_ratios(model, calls).items():
        served = set(calls[r][seq].output_versions.tolist())
        log_rho = abs(math.log(rho))
        if served == {4}:
            assert log_rho < 1e-6, f"call {r}/{seq} of the trained weights must have ρ_s = 1, got {rho}"
        elif 2 in served:
            assert log_rho > math.log(BAND[1]) + 0.01, f"v2 call {r}/{seq}: ρ_s {rho} must be out of band"
        else:
            assert 1e-4 < log_rho < math.log(BAND[1]) - 0.01, f"v3 call {r}/{seq}: ρ_s {rho} must be in band"


@pytest.mark.parametrize(
    "mode", ["call_geo_mask", "rollout_geo_mask", "call_geo_tis", "rollout_geo_tis", "token_tis"]
)
def test_tree_packed_correction_equals_the_per_path_reference_written_by_hand(setup, mode):
    """Loss and every gradient, whole tree and split into micro-batches (a call's rows in several)."""
    model, calls = setup
    cfg = loss_config(mode)
    want_loss, want_grads = reference(model, calls, cfg, mode)
    flat = tree_from_group(group_of(calls)).flatten()
    deepest = int(flat.depth().max()) + 1
    for budget in (None, deepest + 6):
        loss, grads, packs, *_ = packed(model, calls, cfg, budget)
        if budget is not None and cfg.sequence_level:
            spread = Counter(s for p in packs for s in set(p.rows.seq.tolist()))
            assert len(packs) > 2 and max(spread.values()) > 1, "a sequence's rows must span micro-batches"
        assert abs(loss - want_loss) <= TOL * max(1.0, abs(want_loss)), (
            f"{mode} budget={budget}: packed loss {loss} != hand reference {want_loss}"
        )
        assert grads.keys() == want_grads.keys(), f"{mode}: different parameters got gradients"
        worst = max(
            ((grads[k] - want_grads[k]).abs().max() / want_grads[k].abs().max().clamp(min=1.0)).item()
            for k in want_grads
        )
        assert worst <= TOL, (
            f"{mode} budget={budget}: a gradient differs from the hand reference by {worst:.3g}"
        )
        assert any(g.abs().max() > 1e-4 for g in want_grads.values()), f"{mode}: gradients are trivially zero"


def test_the_mask_removes_exactly_the_out_of_band_calls_and_reports_them(setup):
    """call_geo_mask: the rows whose mask is 0 are exactly the output tokens of the calls whose
    hand-computed ρ_s is out of band (v2's), found by (depth, token id) in the tree; the metrics count
    those calls and tokens, and give the mean and max ρ_s over calls."""
    model, calls = setup
    cfg = loss_config("call_geo_mask")
    flat = tree_from_group(group_of(calls)).flatten()
    _, _, packs, old, ratios, _ = packed(model, calls, cfg, int(flat.depth().max()) + 6)
    masked = Counter()
    for p, o, rho in zip(packs, old, ratios, strict=True):
        _, keep = off_policy_weight(cfg, o, p.rows.engine_logprob, rho)
        slots = p.rows.token[keep == 0]
        masked.update(zip(p.position_ids[slots].tolist(), p.input_ids[slots].tolist(), strict=True))
    by_hand = hand_ratios(model, calls)
    out_of_band = [(r, s) for (r, s), rho in by_hand.items() if not BAND[0] <= rho <= BAND[1]]
    want = Counter()
    for r, s in out_of_band:
        c = calls[r][s]
        want.update((len(c.prompt_ids) + i, int(t)) for i, t in enumerate(c.output_ids))
    assert out_of_band and len(out_of_band) < len(by_hand), "test setup: some calls in band, some out"
    assert masked == want, (
        f"masked rows {sorted(masked)} must be the out-of-band calls' tokens {sorted(want)}"
    )

    counts = off_policy_counts(torch.cat([p.rows.seq for p in packs]), torch.cat(ratios), cfg)
    metrics = off_policy_metrics([counts])  # one rank
    n_calls = sum(len(r) for r in calls)
    n_tokens = sum(len(c.output_ids) for r in calls for c in r)
    assert metrics["off_policy_masked_frac"] == pytest.approx(len(out_of_band) / n_calls), "masked calls"
    assert metrics["off_policy_masked_token_frac"] == pytest.approx(sum(want.values()) / n_tokens), (
        "masked tokens"
    )
    assert metrics["off_policy_ratio_mean"] == pytest.approx(np.mean(list(by_hand.values())), rel=1e-9)
    assert metrics["off_policy_ratio_max"] == pytest.approx(max(by_hand.values()), rel=1e-9)


def test_sequence_corrections_refuse_rows_without_their_sequence_ratio(setup):
    """A call's ratio needs all its rows, possibly in other micro-batches: rows_loss cannot guess it."""
    model, calls = setup
    cfg = loss_config("call_geo_tis")
    flat = tree_from_group(group_of(calls)).flatten()
    [p] = pack(flat, None, merge_terms(grpo_terms(flat), "call"), dtype=torch.float64)
    with pytest.raises(Exception, match="sequence ratio"):
        tree_loss(model, p, cfg, old_logprob=old_logprobs(model, p))
