"""The update's memory and time, three ways, on a quickstart-shaped tree and the quickstart's policy:
`whole`, the LM head kept whole for the backward; `chunked`, in recomputed chunks
(`rl.forward.HEAD_CHUNK_ROWS`, the default); `unpooled`, chunked with the heap's large blocks
unpooled (`trainer.memory.unpool_large_blocks` at the quickstart's `trainer.heap_mmap_threshold_mb`).

One GRPO forward + backward (`tree_loss`) of a step like the quickstart's: 4 groups × 8 samples of
one call each, a ~280-token prompt per group (the reference harness's system prompt and a task),
~40 generated tokens per sample (1,698 tree tokens, 1,238 loss rows), SmolLM2-135M in float32,
at the quickstart's temperature 0.7. Each variant runs in its own process, alternating, `--trials` times;
a process makes one warm-up pass, then `--updates` measured ones, the heap trimmed after each as the
trainer does. Memory: the resident set sampled every 5 ms, its peak above the resident set before
the first measured pass (what updates add to a trainer that already holds its weights); time: the
mean measured pass. The head's share of an update's activations grows with its rows (the generated
tokens), the base model's with every tree token.

    .venv/bin/python bench/update_memory.py [--trials 3] [--updates 3] [--activation-checkpointing]

The LAST line is one JSON object of the figures (medians over trials).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

VARIANTS = ("whole", "chunked", "unpooled")
HEAP_MMAP_THRESHOLD_MB = 1.0  # the quickstart's trainer.heap_mmap_threshold_mb
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


class PeakSampler:
    """The largest resident set seen every `every_s` while running, in bytes."""

    def __init__(self, every_s: float = 0.005) -> None:
        self.every_s, self.peak, self._stop = every_s, rss_bytes(), threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_bytes())
            time.sleep(self.every_s)

    def __enter__(self) -> "PeakSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes())


def quickstart_step(
    model_spec: str,
    activation_checkpointing: bool,
    groups: int = 4,
    group_size: int = 8,
    output_tokens: int = 40,
):
    """The policy as the trainer builds it on CPU (train mode, `clawgym_tree` attention, optionally
    checkpointed layers), the packs of a quickstart-shaped GRPO step over it, and the quickstart's
    loss settings: (model, packs, loss config). `bench/bfloat16.py` times the same step."""
    import torch

    from clawgym.policies import load_model
    from clawgym.rl import grpo_terms, merge_terms, pack
    from clawgym.rl.tree_attention import TREE_ATTENTION
    from clawgym.trainer.config import AlgorithmConfig
    from clawgym.trainer.policy import checkpoint_activations
    from clawgym.trajectory import tree_from_groups
    from clawgym.trajectory.synthetic import TraceShape, synthetic_groups

    torch.manual_seed(0)
    model = load_model(model_spec)
    model.set_attn_implementation(TREE_ATTENTION)  # as the trainer builds it on CPU (trainer/policy.py)
    model.train()
    if activation_checkpointing:
        checkpoint_activations(model)  # as trainer/policy.py does
    shape = TraceShape(
        n_groups=groups, group_size=group_size, calls=(1, 1), system_tokens=220, task_tokens=60,
        output_tokens=output_tokens, header_tokens=0, p_header=0.0, p_compaction=0.0, p_subagent=0.0,
        vocab_size=model.config.vocab_size, temperatures=(0.7,),
    )  # fmt: skip
    flat = tree_from_groups(synthetic_groups(shape, seed=1)).flatten()
    packs = pack(flat, 8192, merge_terms(grpo_terms(flat)))
    return model, packs, AlgorithmConfig(clip_low=0.2, clip_high=0.28, tis_cap=2.0).loss_config()


def timed_update(model, packs, cfg, bfloat16: bool, optimizer=None) -> float:
    """Seconds of one forward + backward over `packs` (under bfloat16 autocast if asked) and, given an
    optimizer, its step; gradients dropped and the heap trimmed after. `bench/bfloat16.py` and
    `bench/finetune_update.py` time their arms with it."""
    import torch

    from clawgym.rl import tree_loss
    from clawgym.trainer.memory import return_free_memory

    model.zero_grad(set_to_none=True)
    started = time.perf_counter()
    for pack in packs:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bfloat16):
            loss = tree_loss(model, pack, cfg)[0]
        loss.backward()
    if optimizer is not None:
        optimizer.step()
    seconds = time.perf_counter() - started
    model.zero_grad(set_to_none=True)
    return_free_memory()
    return seconds


def child(args: argparse.Namespace) -> dict:
    from clawgym.rl import forward, tree_loss
    from clawgym.trainer.memory import return_free_memory, unpool_large_blocks

    if args.child == "whole":
        forward.HEAD_CHUNK_ROWS = None
    if args.child == "unpooled":
        assert unpool_large_blocks(HEAP_MMAP_THRESHOLD_MB), "glibc's mallopt refused the threshold"
    model, packs, loss_cfg = quickstart_step(
        args.model, args.activation_checkpointing, args.groups, args.group_size, args.output_tokens
    )

    def update() -> float:
        model.zero_grad(set_to_none=True)
        total = 0.0
        for p in packs:
            loss = tree_loss(model, p, loss_cfg)[0]
            loss.backward()
            total += float(loss)
        return total

    update()  # warm-up: the allocator's pools and the gradients' buffers exist from here on
    model.zero_grad(set_to_none=True)
    return_free_memory()
    before = rss_bytes()
    seconds = []
    with PeakSampler() as sampler:
        for _ in range(args.updates):
            started = time.perf_counter()
            loss = update()
            seconds.append(time.perf_counter() - started)
            model.zero_grad(set_to_none=True)
            return_free_memory()
    head_rows = sum(int(p.rows.token.numel()) for p in packs)
    return {
        "variant": args.child,
        "peak_above_start_gb": (sampler.peak - before) / 1e9,
        "update_s": statistics.mean(seconds),
        "loss": loss,
        "tree_tokens": sum(len(p) for p in packs),
        "loss_rows": head_rows,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--updates", type=int, default=3, help="measured passes per process")
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--output-tokens", type=int, default=40)
    ap.add_argument(
        "--activation-checkpointing",
        action="store_true",
        help="recompute the decoder layers' activations too (trainer.activation_checkpointing), every variant",
    )
    ap.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    for trial in range(args.trials):
        for variant in VARIANTS if trial % 2 == 0 else VARIANTS[::-1]:
            out = subprocess.run(
                [sys.executable, __file__, "--child", variant, "--model", args.model,
                 "--groups", str(args.groups), "--group-size", str(args.group_size),
                 "--output-tokens", str(args.output_tokens), "--updates", str(args.updates)]
                + (["--activation-checkpointing"] if args.activation_checkpointing else []),
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            run = json.loads(out.stdout.strip().splitlines()[-1])
            runs[variant].append(run)
            print(
                f"trial {trial} {variant:8s} peak +{run['peak_above_start_gb']:.2f} GB, "
                f"{run['update_s']:.2f} s, loss {run['loss']:.6f} "
                f"({run['tree_tokens']} tree tokens, {run['loss_rows']} loss rows)",
                flush=True,
            )

    def median(variant: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[variant])

    gb = {v: median(v, "peak_above_start_gb") for v in VARIANTS}
    secs = {v: median(v, "update_s") for v in VARIANTS}
    loss_diff = max(
        abs(r["loss"] - b["loss"]) for v in VARIANTS[1:] for r, b in zip(runs[v], runs["whole"], strict=True)
    )
    print(
        json.dumps(
            {
                "model": args.model,
                "trials": args.trials,
                "activation_checkpointing": args.activation_checkpointing,
                "tree_tokens": runs["whole"][0]["tree_tokens"],
                "loss_rows": runs["whole"][0]["loss_rows"],
                "updates": args.updates,
                **{f"peak_above_start_gb_{v}": round(gb[v], 3) for v in VARIANTS},
                **{f"update_s_{v}": round(secs[v], 3) for v in VARIANTS},
                "peak_ratio_chunked_vs_whole": round(gb["chunked"] / gb["whole"], 3),
                "time_ratio_chunked_vs_whole": round(secs["chunked"] / secs["whole"], 3),
                "peak_ratio_unpooled_vs_chunked": round(gb["unpooled"] / gb["chunked"], 3),
                "time_ratio_unpooled_vs_chunked": round(secs["unpooled"] / secs["chunked"], 3),
                "max_loss_difference": loss_diff,
            }
        )
    )


if __name__ == "__main__":
    main()
