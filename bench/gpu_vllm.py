"""The vLLM stages of bench/gpu.sh: the VllmEngine on a GPU, checked against a teacher-forced forward.

    python bench/gpu_vllm.py serve --model tiny-qwen3            # or a 0.5-8B HF folder
    python bench/gpu_vllm.py long_prompt --model /models/Qwen3-1.7B --prefix 20000

- `serve`: sampled tokens' logprobs (T = 0.7) against the same model's teacher-forced forward
  (transformers, float32 on the GPU); a weight update mid-stream: 8 requests decode while a
  perturbed copy of the weights is loaded (`load_weights`, files), and every token's logprob is
  compared with both weight sets' forward over its whole context: a token counts as `mixed` when
  its version tag names the weights that fit it worse (so also a token decoded by new weights over
  KV the old ones computed); reload time; tokens/s at 32-256 concurrent requests.
- `long_prompt`: Claude-Code-shaped calls: one long shared prefix (system prompt and tools,
  `--prefix` tokens, 20k by default, capped by the context) and short distinct suffixes; the first
  call's time to first token against the later ones', and vLLM's prefix-cache hit rate (its
  Prometheus counters) over those calls.
Each prints one JSON line (bench/gpu.sh collects it). Needs vLLM and CUDA: the stages skip otherwise.
"""

import argparse
import asyncio
import json
import shutil
import tempfile
import time
from pathlib import Path

CACHE_DIR = str(Path("~/.cache/clawgym/models").expanduser())


def engine_for(args, **extra):
    from clawgym.inference.config import InferenceConfig
    from clawgym.inference.vllm_engine import VllmEngine

    cfg = InferenceConfig(model=args.model, engine="vllm", dtype=args.dtype, cache_dir=CACHE_DIR,
                          gpu_memory_utilization=args.gpu_memory_utilization, max_batch=256, **extra)  # fmt: skip
    return VllmEngine.from_config(cfg)


async def collect(engine, prompt: list[int], params) -> tuple[list[int], list[float], list[int]]:
    ids, logprobs, versions = [], [], []
    async for chunk in engine.generate(prompt, params):
        ids += chunk.token_ids
        logprobs += chunk.logprobs
        versions += chunk.policy_versions
    return ids, logprobs, versions


def teacher_forced(model, prompt: list[int], ids: list[int], temperature: float):
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([prompt + ids], device="cuda")).logits[0, len(prompt) - 1 : -1]
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    return logp.gather(1, torch.tensor(ids, device="cuda")[:, None])[:, 0].cpu()


def perturbed_copy(folder: Path, to: Path) -> Path:
    """The served checkpoint with every floating tensor scaled by 1.02 (another, fitting weight set)."""
    from safetensors.torch import load_file, save_file

    to.mkdir(parents=True, exist_ok=True)
    for f in folder.iterdir():
        if f.suffix == ".safetensors":
            state = {k: v * 1.02 if v.is_floating_point() else v for k, v in load_file(str(f)).items()}
            save_file(state, str(to / f.name))
        elif f.is_file():
            shutil.copy(f, to / f.name)
    return to


def cmd_serve(args) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    from clawgym.inference.interface import SamplingParams

    res: dict = {"model": args.model}
    t0 = time.perf_counter()
    engine = engine_for(args)
    res["start_s"] = round(time.perf_counter() - t0, 1)
    folder = engine.folder
    prompts = [[(17 * i + 31 * j) % 1000 + 10 for j in range(32 + 8 * i)] for i in range(8)]
    sample = SamplingParams(max_new_tokens=args.tokens, temperature=0.7, seed=3)
    with tempfile.TemporaryDirectory() as tmp:
        other = perturbed_copy(folder, Path(tmp) / "v1")

        async def body():
            try:
                first = await asyncio.gather(*(collect(engine, p, sample) for p in prompts))
                long = SamplingParams(max_new_tokens=4 * args.tokens, temperature=0.7, seed=5)
                streams = [asyncio.create_task(collect(engine, p, long)) for p in prompts]
                await asyncio.sleep(0.3)
                t = time.perf_counter()
                await engine.load_weights(1, str(other))
                res["reload_s"] = round(time.perf_counter() - t, 3)
                swapped = await asyncio.gather(*streams)
                speed = {}
                for n in args.concurrency:
                    batch = [prompts[i % len(prompts)] for i in range(n)]
                    t = time.perf_counter()
                    done = await asyncio.gather(*(collect(engine, p, sample) for p in batch))
                    speed[n] = round(sum(len(d[0]) for d in done) / (time.perf_counter() - t), 1)
                return first, swapped, speed
            finally:
                await engine.aclose()

        first, swapped, speed = asyncio.run(body())
        torch.cuda.empty_cache()
        dtype = getattr(torch, args.dtype)
        old = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).cuda().eval()
        new = AutoModelForCausalLM.from_pretrained(other, dtype=dtype).cuda().eval()
        res["logprob_max_abs_diff"] = max(
            float((teacher_forced(old, p, ids, 0.7) - torch.tensor(lp)).abs().max())
            for p, (ids, lp, _) in zip(prompts, first, strict=True)
        )
        mixed = switched = 0
        worst = 0.0
        for p, (ids, lp, versions) in zip(prompts, swapped, strict=True):
            by = {0: teacher_forced(old, p, ids, 0.7), 1: teacher_forced(new, p, ids, 0.7)}
            got = torch.tensor(lp)
            switched += len(set(versions)) > 1
            for i, v in enumerate(versions):
                fit, other_fit = (by[v][i] - got[i]).abs(), (by[1 - v][i] - got[i]).abs()
                worst = max(worst, float(fit))
                mixed += bool(fit > other_fit and fit > 1e-3)
        res.update(mixed_tokens=mixed, swap_tagged_max_abs_diff=worst, streams_switched=f"{switched}/8",
                   tok_s=speed)  # fmt: skip
    print(json.dumps(res))
    return res


def prefix_counters() -> tuple[float, float]:
    """vLLM's prefix-cache hits and queries (tokens) from its Prometheus counters in this process."""
    from prometheus_client import REGISTRY

    hits = queries = 0.0
    for metric in REGISTRY.collect():
        for s in metric.samples:
            if s.name.endswith("prefix_cache_hits_total") or s.name.endswith("prefix_cache_hits"):
                hits += s.value
            elif s.name.endswith("prefix_cache_queries_total") or s.name.endswith("prefix_cache_queries"):
                queries += s.value
    return hits, queries


def cmd_long_prompt(args) -> dict:
    from clawgym.inference.interface import SamplingParams

    engine = engine_for(args)
    prefix_len = min(args.prefix, engine.max_context - 1024)
    prefix = [(7 * j) % 900 + 20 for j in range(prefix_len)]
    calls = [prefix + [(13 * i + j) % 900 + 20 for j in range(200 + 50 * i)] for i in range(args.calls)]
    params = SamplingParams(max_new_tokens=16, temperature=0.7, seed=1)

    async def ttft(prompt) -> float:
        t = time.perf_counter()
        stream = engine.generate(prompt, params)
        await anext(stream)
        first = time.perf_counter() - t
        async for _ in stream:
            pass
        return first

    async def body():
        try:
            cold = await ttft(calls[0])
            h0, q0 = prefix_counters()
            warm = [await ttft(c) for c in calls[1:]]
            h1, q1 = prefix_counters()
            return cold, warm, (h1 - h0) / (q1 - q0) if q1 > q0 else None
        finally:
            await engine.aclose()

    cold, warm, hit_rate = asyncio.run(body())
    res = {"prefix_tokens": prefix_len, "calls": args.calls, "ttft_cold_s": round(cold, 4),
           "ttft_warm_s": round(sorted(warm)[len(warm) // 2], 4), "prefix_cache_hit_rate": hit_rate}  # fmt: skip
    print(json.dumps(res))
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("serve", "long_prompt"):
        p = sub.add_parser(name)
        p.add_argument("--model", default="tiny-qwen3")
        p.add_argument("--dtype", default="bfloat16")
        p.add_argument("--gpu-memory-utilization", type=float, default=0.5)
    sub.choices["serve"].add_argument("--tokens", type=int, default=64)
    sub.choices["serve"].add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")],
                                      default=[32, 64, 128, 256])  # fmt: skip
    sub.choices["long_prompt"].add_argument("--prefix", type=int, default=20000)
    sub.choices["long_prompt"].add_argument("--calls", type=int, default=8)
    args = ap.parse_args()
    {"serve": cmd_serve, "long_prompt": cmd_long_prompt}[args.cmd](args)


if __name__ == "__main__":
    main()
