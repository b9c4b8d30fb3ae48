"""Shared-prefix decoding against whole rows: one long harness prompt, many tasks, one KV budget.

Every call of a tool-using harness starts with the same system prompt and tool definitions:
opencode's first call is 7,710 SmolLM2 tokens, 7,683 of them before the task (bench/harness_prompts.py).
This serves `--requests` prompts of `--prefix` shared tokens and a distinct task of `--task` tokens,
each generating exactly `--new` tokens, all submitted at once, through the torch engine with the
quickstart's engine settings (SmolLM2-135M, float32, `inference.kv_cache_mb`, the packing budget),
twice in alternating rounds: rows whole (`inference.shared_prefix_tokens=0`) and rows over one
shared copy of the prefix. The prompt's tokens are drawn (the attention's cost does not depend on
them), so no harness runs; each arm keeps its best round.

    .venv/bin/python bench/shared_prefix.py [--prefix 7683] [--task 27] [--requests 32] [--new 32] [--rounds 2]

The LAST line is one JSON object: per arm `wall_s`, `max_rows` and `rows_per_step` (the running
batch), `decode_steps`, `kv_mb_peak` (the running batch's KV buffers and prefixes at their
largest), `tokens_per_s`; and `speedup` and `max_rows_ratio` of shared over whole.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time

from clawgym.inference.config import InferenceConfig
from clawgym.inference.factory import create_engine
from clawgym.inference.interface import SamplingParams
from clawgym.policies import load_model


def prompts(prefix: int, task: int, requests: int, vocab: int, seed: int = 0) -> list[list[int]]:
    draw = random.Random(seed)
    shared = [draw.randrange(vocab) for _ in range(prefix)]
    return [shared + [draw.randrange(vocab) for _ in range(task)] for _ in range(requests)]


async def serve(settings: InferenceConfig, batch: list[list[int]], new: int) -> dict:
    engine = create_engine(settings)
    params = SamplingParams(max_new_tokens=new, temperature=1.0)

    async def one(prompt: list[int]) -> None:
        async for _ in engine.generate(prompt, params):
            pass

    try:
        wall = time.perf_counter()
        await asyncio.gather(*(one(p) for p in batch))
        wall = time.perf_counter() - wall
        c = engine.counters()
    finally:
        await engine.aclose()
    return {
        "wall_s": round(wall, 1),
        "max_rows": max(c.batch_sizes),
        "rows_per_step": round(c.decode_rows / max(1, c.decode_steps), 1),
        "decode_steps": c.decode_steps,
        "shared_rows": c.shared_rows,
        "kv_mb_peak": round(c.kv_bytes_peak / 2**20),
        "tokens_per_s": round(c.generated_tokens / wall, 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--prefix", type=int, default=7683, help="shared prompt tokens (opencode's first call)")
    p.add_argument("--task", type=int, default=27, help="each prompt's own tokens after the prefix")
    p.add_argument("--requests", type=int, default=32)
    p.add_argument("--new", type=int, default=32, help="tokens each request generates")
    p.add_argument("--kv-cache-mb", type=float, default=1024, help="the quickstart's KV budget")
    p.add_argument("--min-share", type=int, default=256, help="the shared arm's inference.shared_prefix_tokens")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    base = InferenceConfig(
        model=args.model,
        engine="torch",
        dtype="float32",
        grpc_url="",
        kv_cache_mb=args.kv_cache_mb,
        max_batch=args.requests,
        pack_weights_mb=128,
        prefix_cache_tokens=max(2048, args.prefix + args.task),  # the harness prompt stays cached
    )
    arms = {
        "whole": base.model_copy(update={"shared_prefix_tokens": 0}),
        "shared": base.model_copy(update={"shared_prefix_tokens": args.min_share}),
    }
    vocab = load_model(args.model).config.get_text_config().vocab_size
    batch = prompts(args.prefix, args.task, args.requests, vocab)
    print(f"{args.requests} prompts of {args.prefix} shared + {args.task} own tokens, {args.new} new each, "
          f"{args.kv_cache_mb:.0f} MB of KV", flush=True)  # fmt: skip
    best: dict[str, dict] = {}
    for r in range(args.rounds):
        for name in list(arms) if r % 2 == 0 else list(arms)[::-1]:
            figures = asyncio.run(serve(arms[name], batch, args.new))
            print(f"round {r + 1}, {name}: {json.dumps(figures)}", flush=True)
            if name not in best or figures["wall_s"] < best[name]["wall_s"]:
                best[name] = figures
    whole, shared = best["whole"], best["shared"]
    print(json.dumps({
        "prefix": args.prefix, "task": args.task, "requests": args.requests, "new": args.new,
        "kv_cache_mb": args.kv_cache_mb, "arms": best,
        "speedup": round(whole["wall_s"] / shared["wall_s"], 2),
        "max_rows_ratio": round(shared["max_rows"] / whole["max_rows"], 2),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
