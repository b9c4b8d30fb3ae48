"""The core invariant: a packed tree's loss and every parameter gradient equal the sum over its
rollout paths trained one at a time, for GRPO and for PPO with a value head, whole or split.

Real (tiny, randomly initialised) Llama, Qwen2 and Qwen3 models, float64 within 1e-6 and float32
within 1e-4, relative to each tensor's scale: |Δg| <= tol · max(1, max|g|). Why relative: HF's
RMSNorm computes in float32 even in a float64 model, so float64 sums taken in a different order
(one packed pass vs several paths) round differently there, ~1e-7 · |g| (with the norm in float64
the difference is ~1e-14). With token/sequence aggregation |g| < 1 and this is the absolute bound. The reference runs each path through the model's ordinary causal forward
(`clawgym.rl.per_path`); the tree runs once through the tree-masked forward (`clawgym.rl.losses`).
Trees come from the synthetic harness-shaped generator with a small vocabulary, so samples share
generated tokens (with equal or different engine logprobs), compactions and sub-agents branch.
"""

import copy
import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config, Qwen3Config

from clawgym.rl import ValueHead, gae_terms, grpo_terms, merge_terms, pack, tree_loss, value_terms
from clawgym.rl.forward import packed_forward, values_by_position
from clawgym.rl.per_path import pack_paths, path_forward, path_loss, path_rows
from clawgym.rl.tree_attention import TREE_ATTENTION
from clawgym.trainer.config import AlgorithmConfig
from clawgym.trajectory import FlatTree, tree_from_groups
from clawgym.trajectory.synthetic import TraceShape, synthetic_groups

VOCAB = 48
TOLERANCE = {torch.float64: 1e-6, torch.float32: 1e-4}
RANDOM_HEAD = 0.1  # a value head with values that vary, so GAE and the value loss are exercised
CONFIGS = {
    "llama": lambda: LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=True,
    ),
    "qwen2": lambda: Qwen2Config(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512,
    ),
    "qwen3": lambda: Qwen3Config(
        vocab_size=VOCAB, hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=12, max_position_embeddings=512,
    ),
}  # fmt: skip
_MODELS: dict = {}


def tiny_model(arch: str, dtype: torch.dtype, attn: str = "sdpa") -> torch.nn.Module:
    """A seeded tiny model, built once per (arch, dtype, attention) and reused (tests never step it);
    the same weights under every attention implementation."""
    key = (arch, dtype, attn)
    if key not in _MODELS:
        torch.manual_seed(0)
        cfg = CONFIGS[arch]()
        cfg._attn_implementation = attn
        _MODELS[key] = AutoModelForCausalLM.from_config(cfg, dtype=dtype).eval()
    return _MODELS[key]


def random_tree(
    seed: int, group_size: int = 3, n_groups: int = 1, vocab: int = 12, temperatures: tuple = (None,)
) -> FlatTree:
    shape = TraceShape(
        n_groups=n_groups, group_size=group_size, calls=(2, 4), system_tokens=10, task_tokens=3,
        observation_tokens=3, output_tokens=4, header_tokens=2, p_header=0.8, p_compaction=0.25,
        p_subagent=0.25, subagent_system_tokens=4, vocab_size=vocab, versions=(0, 1),
        logprob_mean=-math.log(VOCAB), logprob_std=0.3, temperatures=temperatures,
    )  # fmt: skip
    return tree_from_groups(synthetic_groups(shape, seed)).flatten()


def grads(model: torch.nn.Module, *extra: torch.nn.Module) -> dict[str, torch.Tensor]:
    out = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    for i, m in enumerate(extra):
        out.update(
            {f"extra{i}.{n}": p.grad.detach().clone() for n, p in m.named_parameters() if p.grad is not None}
        )
    return out


def zero(*modules: torch.nn.Module) -> None:
    for m in modules:
        m.zero_grad(set_to_none=True)


def packed_total(model, flat, terms, budget, cfg, value_head=None, ref_model=None, old_from_engine=True):
    """Σ over micro-batches of tree_loss, gradients accumulated; returns (loss, n_packs, grads)."""
    vt = value_terms(terms) if terms.returns is not None else None
    packs = pack(flat, budget, merge_terms(terms), vt, dtype=next(model.parameters()).dtype)
    zero(model, *([value_head] if value_head else []))
    total = 0.0
    for pk in packs:
        old = pk.rows.engine_logprob if old_from_engine else None
        loss, _ = tree_loss(model, pk, cfg, value_head=value_head, ref_model=ref_model, old_logprob=old)
        loss.backward()
        total += loss.item()
    return total, len(packs), grads(model, *([value_head] if value_head else []))


def per_path_total(model, flat, terms, cfg, value_head=None, ref_model=None, old_from_engine=True):
    """Σ over rollout paths trained one at a time; returns (loss, grads)."""
    zero(model, *([value_head] if value_head else []))
    dtype = next(model.parameters()).dtype
    total = 0.0
    for p in range(len(terms.path_rollout)):
        rows = path_rows(terms, p, flat.path_positions(int(terms.path_node[p])), dtype)
        old = rows.engine_logprob if old_from_engine else None
        loss, _ = path_loss(model, flat, terms, p, cfg, value_head, ref_model, old_logprob=old)
        loss.backward()
        total += loss.item()
    return total, grads(model, *([value_head] if value_head else []))


def worst_gradient_error(gp: dict, gl: dict) -> float:
    """max over parameters of max|Δg| / max(1, max|g|) (see the module docstring)."""
    return max(((gp[k] - gl[k]).abs().max() / gl[k].abs().max().clamp(min=1.0)).item() for k in gl)


def assert_same(
    packed: tuple[float, dict],
    linear: tuple[float, dict],
    tol: float,
    what: str,
    expect_gradient: bool = True,
) -> None:
    """Packed == per path within `tol`; `expect_gradient`: and the gradients are not all ~0 (a case
    that compares nothing; False where every advantage is 0, e.g. GRPO groups of one sample)."""
    (lp, gp), (ll, gl) = packed, linear
    assert abs(lp - ll) <= tol * max(1.0, abs(ll)), f"{what}: packed loss {lp} != per-path sum {ll}"
    assert gp.keys() == gl.keys(), f"{what}: different parameters got gradients"
    worst = worst_gradient_error(gp, gl)
    assert worst <= tol, f"{what}: a parameter gradient differs by {worst:.3g} > {tol}"
    if expect_gradient:
        assert any(g.abs().max().item() > 100 * tol for g in gl.values()), (
            f"{what}: gradients are trivially zero"
        )


def split_budget(flat: FlatTree, fraction: float) -> int:
    """A budget that forces a split: between the longest path and the whole tree."""
    deepest = int(flat.depth().max()) + 1
    return max(deepest, int(deepest + fraction * (flat.n_positions - deepest)))


LOSS_CFG = AlgorithmConfig(
    clip_low=0.2, clip_high=0.28, tis_cap=1.5, entropy_coef=0.01, kl_coef=0.05, value_coef=0.5
).loss_config()


ATTNS = ["sdpa", TREE_ATTENTION]  # the dense tree mask, and block-sparse tree attention


@pytest.mark.parametrize("attn", ATTNS)
@pytest.mark.parametrize("arch", sorted(CONFIGS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_grpo_packed_tree_equals_sum_over_paths_whole_and_split(arch, dtype, attn):
    """GRPO with clipping, TIS against engine logprobs, KL to a reference and an entropy bonus.
    The trees (~60-100 tokens) span several of tree attention's query blocks (16 tokens)."""
    model = tiny_model(arch, dtype, attn)
    ref = copy.deepcopy(model)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.05 * torch.randn_like(p))
    flat = random_tree(seed=7, group_size=4)
    terms = grpo_terms(flat, aggregation="sequence")
    linear = per_path_total(model, flat, terms, LOSS_CFG, ref_model=ref)
    for budget in (None, split_budget(flat, 0.3)):
        loss, n_packs, g = packed_total(model, flat, terms, budget, LOSS_CFG, ref_model=ref)
        assert budget is None or n_packs > 1, "the split case must really split"
        assert_same((loss, g), linear, TOLERANCE[dtype], f"GRPO {arch} {dtype} {attn} budget={budget}")


@pytest.mark.parametrize("attn", ATTNS)
@pytest.mark.parametrize("arch", sorted(CONFIGS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_ppo_with_value_head_packed_tree_equals_sum_over_paths_whole_and_split(arch, dtype, attn):
    """PPO-GAE: values from the packed no-grad pass, GAE per path, clipped value loss, value-head grads."""
    model = tiny_model(arch, dtype, attn)
    torch.manual_seed(1)
    head = ValueHead(model.config.hidden_size, dtype=dtype, init_std=RANDOM_HEAD)
    flat = random_tree(seed=11, group_size=3)
    budget = split_budget(flat, 0.25)
    values = values_by_position(model, head, pack(flat, budget, dtype=dtype), flat.n_positions)
    terms = gae_terms(flat, values, gamma=0.99, lam=0.9)
    linear = per_path_total(model, flat, terms, LOSS_CFG, value_head=head)
    for b in (None, budget):
        loss, _, g = packed_total(model, flat, terms, b, LOSS_CFG, value_head=head)
        assert_same((loss, g), linear, TOLERANCE[dtype], f"PPO {arch} {dtype} {attn} budget={b}")
    assert any(k.startswith("extra0.") for k in linear[1]), "the value head must receive gradients"


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_calls_at_different_temperatures_packed_tree_equals_sum_over_paths(algo):
    """Each call's tokens are scored at the temperature the engine sampled them at (a call without
    one at the config's), in the packed tree as on every path alone; and the temperature matters."""
    dtype = torch.float64
    model = tiny_model("qwen3", dtype)
    ref = copy.deepcopy(model)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.05 * torch.randn_like(p))
    flat = random_tree(seed=5, group_size=4, temperatures=(0.6, None, 1.3))
    seen = {round(float(t), 3) if not math.isnan(t) else "unknown" for t in flat.gen_temperature}
    assert seen == {0.6, 1.3, "unknown"}, f"test setup: the tree must mix temperatures, got {seen}"
    cfg = AlgorithmConfig(clip_low=0.2, clip_high=0.28, tis_cap=1.5, entropy_coef=0.01, kl_coef=0.05,
                          value_coef=0.5, temperature=0.8).loss_config()  # fmt: skip
    head = None
    if algo == "grpo":
        terms = grpo_terms(flat)
    else:
        torch.manual_seed(2)
        head = ValueHead(model.config.hidden_size, dtype=dtype, init_std=RANDOM_HEAD)
        values = values_by_position(model, head, pack(flat, None, dtype=dtype), flat.n_positions)
        terms = gae_terms(flat, values, gamma=0.99, lam=0.9)
    linear = per_path_total(model, flat, terms, cfg, value_head=head, ref_model=ref)
    for budget in (None, split_budget(flat, 0.3)):
        loss, _, g = packed_total(model, flat, terms, budget, cfg, value_head=head, ref_model=ref)
        assert_same((loss, g), linear, TOLERANCE[dtype], f"{algo} mixed temperatures budget={budget}")
    [pk] = pack(flat, None, merge_terms(terms), dtype=dtype)
    with torch.no_grad():
        at_own = packed_forward(model, pk, temperature=0.8).logprob
        pk.rows.temperature = torch.full_like(pk.rows.temperature, 0.8)
        at_one = packed_forward(model, pk, temperature=0.8).logprob
    assert (at_own - at_one).abs().max() > 1e-3, "rows at 0.6 and 1.3 must not be scored at 0.8"


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # shrinking a model-sized case takes minutes
)
@given(
    seed=st.integers(0, 10_000),
    arch=st.sampled_from(sorted(CONFIGS)),
    group_size=st.integers(1, 4),
    n_groups=st.integers(1, 2),
    vocab=st.integers(6, 40),
    fraction=st.floats(0.0, 1.0),
    aggregation=st.sampled_from(["token", "sequence", "sum"]),
    old_from_engine=st.booleans(),
    algo=st.sampled_from(["grpo", "ppo"]),
    attn=st.sampled_from(ATTNS),
)
def test_random_trees_packed_equal_per_path_in_float64(
    seed, arch, group_size, n_groups, vocab, fraction, aggregation, old_from_engine, algo, attn
):
    """Property: for random trees, budgets, aggregations, both algorithms and both tree attentions,
    packed == Σ paths."""
    dtype = torch.float64
    model = tiny_model(arch, dtype, attn)
    flat = random_tree(seed, group_size, n_groups, vocab)
    budget = split_budget(flat, fraction)
    head = None
    if algo == "grpo":
        terms = grpo_terms(flat, aggregation=aggregation, leave_one_out=seed % 2 == 0)
    else:
        torch.manual_seed(seed)
        head = ValueHead(model.config.hidden_size, dtype=dtype, init_std=RANDOM_HEAD)
        values = values_by_position(model, head, pack(flat, budget, dtype=dtype), flat.n_positions)
        terms = gae_terms(flat, values, gamma=1.0, lam=0.95, aggregation=aggregation)
    cfg = AlgorithmConfig(
        tis_cap=2.0, entropy_coef=0.02, value_clip=None if seed % 3 == 0 else 0.1
    ).loss_config()
    linear = per_path_total(model, flat, terms, cfg, head, old_from_engine=old_from_engine)
    packed = packed_total(model, flat, terms, budget, cfg, head, old_from_engine=old_from_engine)
    loss, _, g = packed
    if not linear[1]:  # no generated token anywhere (cannot happen with >= 2 calls, kept for safety)
        assert not g, "the packed tree must not produce gradients the paths do not"
        return
    # GRPO groups of one sample, or of equal rewards, have advantage 0 everywhere: only the small
    # entropy term then has a gradient, and equality is all there is to check
    some_advantage = algo == "ppo" or bool(np.any(terms.adv != 0))
    what = f"{algo} {arch} {attn} budget={budget}"
    assert_same((loss, g), linear, TOLERANCE[dtype], what, expect_gradient=some_advantage)


@pytest.mark.parametrize("arch", sorted(CONFIGS))
def test_packed_logprobs_and_values_equal_per_path_forward_passes(arch):
    dtype = torch.float64
    model = tiny_model(arch, dtype)
    head = ValueHead(model.config.hidden_size, dtype=dtype, init_std=RANDOM_HEAD)
    flat = random_tree(seed=3, group_size=4)
    terms = gae_terms(flat, np.zeros(flat.n_positions), gamma=1.0, lam=1.0)
    with torch.no_grad():
        packed = {}
        for pk in pack(flat, split_budget(flat, 0.5), merge_terms(terms), value_terms(terms), dtype=dtype):
            out = packed_forward(model, pk, head)
            for i, slot in enumerate(pk.rows.token.tolist()):
                packed[int(pk.tree_pos[slot])] = float(out.logprob[i])
            for i, slot in enumerate(pk.rows.value_token.tolist()):
                packed[("v", int(pk.tree_pos[slot]))] = float(out.values[i])
        checked = 0
        for p in range(len(terms.path_rollout)):
            positions = flat.path_positions(int(terms.path_node[p]))
            logp_all, values = path_forward(
                model, torch.from_numpy(flat.tokens[positions].astype(np.int64)), head
            )
            for u in terms.pos[terms.rows_of(p)]:
                k = int(np.searchsorted(positions, u))
                want = float(logp_all[k - 1, int(flat.tokens[u])])
                assert abs(packed[int(u)] - want) < 1e-9, f"logprob at position {u} differs on path {p}"
                assert abs(packed[("v", int(u))] - float(values[k - 1])) < 1e-9, f"value at {u} differs"
                checked += 1
    assert checked == len(terms.pos), "every (path, generated token) was compared"


@pytest.mark.parametrize(
    ("attn", "sliding"),
    [("eager", False), ("sdpa", True), ("eager", True), (TREE_ATTENTION, True)],
    ids=["eager", "sdpa-sliding-window", "eager-sliding-window", "tree-sliding-window"],
)
def test_eager_attention_and_sliding_window_layers_pack_exactly(attn, sliding):
    """The additive eager mask, and sliding-window layers (window measured along the path), give
    the same logprobs and gradients as HF's own masks on each path."""
    torch.manual_seed(0)
    cfg = Qwen3Config(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=512,
        use_sliding_window=sliding, sliding_window=5 if sliding else None, max_window_layers=1,
    )  # fmt: skip
    cfg._attn_implementation = attn
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float64).eval()
    if sliding:
        assert "sliding_attention" in model.config.layer_types, "the config must really have sliding layers"
    flat = random_tree(seed=5, group_size=3)
    terms = grpo_terms(flat)
    linear = per_path_total(model, flat, terms, LOSS_CFG)
    for budget in (None, split_budget(flat, 0.4)):
        loss, _, g = packed_total(model, flat, terms, budget, LOSS_CFG)
        assert_same((loss, g), linear, TOLERANCE[torch.float64], f"{attn} sliding={sliding} budget={budget}")


def test_trimmed_logits_per_path_baseline_equals_the_full_logits_reference():
    """The bench's per-path baseline runs the LM head only where rows need it; same loss and grads."""
    model = tiny_model("qwen3", torch.float64)
    flat = random_tree(seed=2, group_size=3)
    terms = grpo_terms(flat)
    full = per_path_total(model, flat, terms, LOSS_CFG, old_from_engine=False)
    zero(model)
    total = 0.0
    for p in range(len(terms.path_rollout)):
        loss, _ = path_loss(model, flat, terms, p, LOSS_CFG, trim_logits=True)
        loss.backward()
        total += loss.item()
    assert_same((total, grads(model)), full, 1e-9, "trimmed vs full logits")


def test_sequence_packed_paths_baseline_equals_the_per_path_reference():
    """The bench's strongest linear baseline (paths side by side, block-causal mask) is the same loss."""
    model = tiny_model("llama", torch.float64)
    flat = random_tree(seed=4, group_size=3)
    terms = grpo_terms(flat)
    reference = per_path_total(model, flat, terms, LOSS_CFG)
    deepest = int(flat.depth().max()) + 1
    zero(model)
    total = 0.0
    packs = pack_paths(flat, terms, budget=2 * deepest, dtype=torch.float64)
    assert len(packs) > 1 and sum(len(p) for p in packs) == sum(
        len(flat.path_positions(int(n))) for n in terms.path_node
    ), "every path is laid out whole, once"
    for pk in packs:
        loss, _ = tree_loss(model, pk, LOSS_CFG, old_logprob=pk.rows.engine_logprob)
        loss.backward()
        total += loss.item()
    assert_same((total, grads(model)), reference, 1e-6, "sequence-packed paths")
