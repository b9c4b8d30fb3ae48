"""bfloat16 against float32 on this CPU, for the quickstart's two computations, side by side in one run.

- **Engine**: the quickstart's engine settings (SmolLM2-135M, 1,024 MB of KV, prefix cache, 128 MB of
  packed float32 layers) serving `--requests` prompts of the reference harness's shape (259 shared
  tokens and 20 of their own) that each sample `--new` tokens at T = 0.7, all at once; a float32
  engine and a bfloat16 one alternate in `--rounds` rounds, each keeping its best.
- **Update**: one GRPO forward + backward of a quickstart step (4 groups × 8 samples of one call, a
  ~280-token prompt per group, 40 tokens a sample; activation checkpointing and 1 MB unpooled blocks
  as the quickstart has them), float32 against `trainer.autocast: bfloat16` (`torch.autocast`; the
  weights stay float32), alternating, each its best of `--rounds`.
- **Mismatch**: the mean |logprob difference| of sampled tokens between what the bfloat16 engine
  reports and a float32 forward (a float32 trainer beside a bfloat16 engine) and a bfloat16-autocast
  forward (both sides in bfloat16), at T = 0.7.

`torch.ops.mkldnn._is_mkldnn_bf16_supported()` (printed) is the quickstart's `--compute-dtype auto`
test; where it is false bfloat16 is emulated and the ratios fall below 1. The LAST line is one JSON
object.

    .venv/bin/python bench/bfloat16.py [--threads 1] [--rounds 3]
    ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 .venv/bin/python bench/bfloat16.py   # as on an AVX2 CPU
"""

import argparse
import asyncio
import json
import time

import torch
from update_memory import (  # bench/: the script's own folder
    HEAP_MMAP_THRESHOLD_MB,
    quickstart_step,
    timed_update,
)

from clawgym.inference.config import InferenceConfig
from clawgym.inference.factory import create_engine
from clawgym.inference.interface import SamplingParams
from clawgym.policies import load_model
from clawgym.trainer.memory import unpool_large_blocks

MODEL = "smollm2-135m"
TEMPERATURE = 0.7


def prompts(n: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(0)
    shared = torch.randint(100, 40000, (259,), generator=gen).tolist()
    return [shared + torch.randint(100, 40000, (20,), generator=gen).tolist() for _ in range(n)]


async def serve(
    engine, batch: list[list[int]], new: int
) -> tuple[float, list[tuple[list[int], list[int], list[float]]]]:
    """Seconds to serve `batch` at once, and each call's (prompt, sampled tokens, reported logprobs)."""

    async def one(i: int, prompt: list[int]):
        ids, logprobs = [], []
        params = SamplingParams(max_new_tokens=new, temperature=TEMPERATURE, seed=i)
        async for chunk in engine.generate(prompt, params):
            ids += chunk.token_ids
            logprobs += chunk.logprobs
        return prompt, ids, logprobs

    started = time.perf_counter()
    calls = await asyncio.gather(*(one(i, p) for i, p in enumerate(batch)))
    return time.perf_counter() - started, calls


def engine_arms(args) -> tuple[dict[str, float], list]:
    engines = {
        dtype: create_engine(
            InferenceConfig(model=MODEL, engine="torch", dtype=dtype, grpc_url="", prefix_cache_tokens=2048, pack_weights_mb=128)
        )
        for dtype in ("float32", "bfloat16")
    }  # fmt: skip
    batch = prompts(args.requests)
    best = {dtype: float("inf") for dtype in engines}
    for r in range(args.rounds):
        for dtype, engine in engines.items():
            seconds, calls = asyncio.run(serve(engine, batch, args.new))
            best[dtype] = min(best[dtype], seconds)
            print(f"engine round {r + 1}, {dtype}: {seconds:.2f} s", flush=True)
    for engine in engines.values():
        asyncio.run(engine.aclose())
    return best, calls  # the last arm's: the bfloat16 engine's


def update_arms(args) -> dict[str, float]:
    assert unpool_large_blocks(HEAP_MMAP_THRESHOLD_MB), "glibc's mallopt refused the threshold"
    model, packs, cfg = quickstart_step(MODEL, activation_checkpointing=True)

    def update(bfloat16: bool) -> float:
        return timed_update(model, packs, cfg, bfloat16)

    update(False), update(True)  # warm-up: pools and gradient buffers
    best = {"float32": float("inf"), "bfloat16": float("inf")}
    for r in range(args.rounds):
        for arm in best:
            seconds = update(arm == "bfloat16")
            best[arm] = min(best[arm], seconds)
            print(f"update round {r + 1}, {arm}: {seconds:.2f} s", flush=True)
    return best


def mismatch(calls: list) -> dict[str, float]:
    """Mean |engine logprob − trainer logprob| of the bfloat16 engine's sampled tokens."""
    model = load_model(MODEL).eval()
    out = {}
    for arm in ("float32", "bfloat16"):
        diffs = []
        for prompt, ids, logprobs in calls:
            tokens = torch.tensor([prompt + ids])
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=arm == "bfloat16"):
                logits = model(tokens).logits[0, len(prompt) - 1 : -1].float() / TEMPERATURE
            mine = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids)[:, None])[:, 0]
            diffs.append((mine - torch.tensor(logprobs)).abs())
        out[arm] = float(torch.cat(diffs).mean())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the quickstart's on 2 cores: 1)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--new", type=int, default=40, help="tokens sampled per request")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    native = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    print(f"oneDNN computes bfloat16 natively here: {native}", flush=True)
    engine, calls = engine_arms(args)
    update = update_arms(args)
    mism = mismatch(calls)
    figures = {
        "bf16_native": native,
        "threads": args.threads,
        "engine_s_float32": round(engine["float32"], 2),
        "engine_s_bfloat16": round(engine["bfloat16"], 2),
        "engine_speedup": round(engine["float32"] / engine["bfloat16"], 2),
        "update_s_float32": round(update["float32"], 2),
        "update_s_bfloat16": round(update["bfloat16"], 2),
        "update_speedup": round(update["float32"] / update["bfloat16"], 2),
        "mismatch_vs_float32_trainer": round(mism["float32"], 4),
        "mismatch_vs_bfloat16_trainer": round(mism["bfloat16"], 4),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
