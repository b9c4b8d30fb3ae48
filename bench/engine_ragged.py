"""Torch engine on a GRPO step's shape, where rows leave the decode batch one by one: this code
beside an earlier checkout's, in alternating rounds.

The quickstart's rollouts are 32 single-turn calls started together (4 reference-harness tasks x 8
samples) that stop at different lengths, so the running batch loses a row at most decode steps. A
leaving row used to copy the whole KV cache of the rows that stay (`BatchKVCache.keep`); now only
the rows that fill the holes move. Here: the same 32 prompts, greedy, request i capped at
`--min-tokens` + i * (`--max-tokens` - `--min-tokens`) / 31 new tokens (no stop token), so one row
leaves at nearly every step of the second half; tokens/s of the whole batch on a fresh engine
(prefix cache on, as the quickstart runs it).

`--baseline-tree T`: each round also runs this file under T's own install (`T/.venv/bin/python`,
so it imports T's clawgym; e.g. `git worktree add ../base <commit> && ../base/install.sh`).
Rounds alternate (new, old, new, old, ...) and each side keeps its best round, in tokens/s of wall
time and of process CPU time.

    .venv/bin/python bench/engine_ragged.py [--baseline-tree ../base] [--rounds 3] [--model smollm2-135m]

The last line is one JSON object of the figures.
"""

import argparse
import asyncio
import json
import subprocess
import sys
import time


def measure(args) -> dict:
    """One round of this side: tokens, wall seconds and process CPU seconds of the ragged batch."""
    import torch
    from inference import agent_prompts  # bench/inference.py, beside this file

    from clawgym.inference.interface import SamplingParams
    from clawgym.inference.torch_engine import TorchEngine
    from clawgym.policies import load_model, load_tokenizer

    if args.threads:
        torch.set_num_threads(args.threads)
    model = load_model(args.model, dtype=torch.float32)
    prompts = agent_prompts(load_tokenizer(args.model))  # bench/inference.py's GRPO step: 4 tasks x 8
    span = args.max_tokens - args.min_tokens
    caps = [args.min_tokens + i * span // (len(prompts) - 1) for i in range(len(prompts))]

    async def run() -> tuple[int, float, float]:
        engine = TorchEngine(model, name=args.model, max_batch=32)
        try:

            async def one(prompt: list[int], cap: int) -> int:
                params = SamplingParams(max_new_tokens=cap, temperature=0.0)
                return sum([len(c.token_ids) async for c in engine.generate(prompt, params)])

            wall, cpu = time.perf_counter(), time.process_time()
            counts = await asyncio.gather(*(one(p, c) for p, c in zip(prompts, caps, strict=True)))
            return sum(counts), time.perf_counter() - wall, time.process_time() - cpu
        finally:
            await engine.aclose()

    tokens, wall, cpu = asyncio.run(run())
    return {"tokens": tokens, "wall_s": wall, "cpu_s": cpu}


def side(args, tree: str) -> dict:
    """One round of this file in a subprocess: this install, or `tree`'s."""
    python = f"{tree}/.venv/bin/python" if tree else sys.executable
    argv = [python, __file__, "--worker", "--model", args.model, "--threads", str(args.threads)]
    argv += ["--min-tokens", str(args.min_tokens), "--max-tokens", str(args.max_tokens)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-tokens", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=40)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--baseline-tree", default="", help="an earlier checkout with its own .venv")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(measure(args)))
        return
    sides = {"new": ""} | ({"old": args.baseline_tree} if args.baseline_tree else {})
    best: dict[str, dict] = {}
    for r in range(args.rounds):
        for name, tree in sides.items():
            got = side(args, tree)
            got["tok_per_s"] = got["tokens"] / got["wall_s"]
            got["tok_per_cpu_s"] = got["tokens"] / got["cpu_s"]
            print(f"round {r + 1} {name}: {got['tokens']} tokens, {got['wall_s']:.2f} s wall "
                  f"({got['tok_per_s']:.1f} tok/s), {got['cpu_s']:.2f} s CPU ({got['tok_per_cpu_s']:.1f} tok/CPU-s)")  # fmt: skip
            if name not in best or got["tok_per_s"] > best[name]["tok_per_s"]:
                best[name] = got
    figures = {"model": args.model, "rows": 32, "tokens": [args.min_tokens, args.max_tokens]}
    for name, got in best.items():
        figures[f"tok_per_s_{name}"] = round(got["tok_per_s"], 2)
        figures[f"tok_per_cpu_s_{name}"] = round(got["tok_per_cpu_s"], 2)
    if "old" in best:
        figures["speedup"] = round(best["new"]["tok_per_s"] / best["old"]["tok_per_s"], 3)
        figures["cpu_speedup"] = round(best["new"]["tok_per_cpu_s"] / best["old"]["tok_per_cpu_s"], 3)
        print(
            f"new / old: {figures['speedup']:.3f}x tokens/s, {figures['cpu_speedup']:.3f}x tokens per CPU-s"
        )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
