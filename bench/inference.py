"""Benchmark of the torch engine: continuous batching vs one-by-one vs `transformers.generate`, and reload time.

Measured side by side in one run, on one model (default SmolLM2-135M, fp32, CPU; `--device cuda`
puts the model, its KV cache and HF generate on a GPU, as bench/gpu.sh does):
  - tokens/s of N requests run one by one (batch 1), the baseline;
  - tokens/s of 8 and of 32 concurrent requests (they share decode steps);
  - tokens/s of `model.generate` on one left-padded batch of the same 32 prompts (greedy);
  - seconds to hot-reload a checkpoint of the same model (`load_weights`);
  - agent-shaped prefill: a GRPO step's first calls (4 tasks x 8 samples of the reference harness's
    real first prompt: system prompt, worked examples, task) with the prefix cache on vs off, each
    round on a fresh engine (as after a weight swap, when the cache starts empty).
The batching figures run with the prefix cache off (their rounds repeat the same prompts); the
`*_prefix_cache` ones run the same 32 prompts once per round on a fresh engine with the cache on (the
engine's default), so prompts arriving together share the prefix they have in common (SmolLM2's chat
template puts the same system prompt first in each) and nothing carries over between rounds.
Two engines run side by side in the same rounds: batched prefill (`--prefill-batch`, default 32
prompts per forward) and the one-prompt-per-forward path (`prefill_batch=1`, the path before batched
prefill); `--prefill-batch 1` runs only that one. The main figures are the first engine's, the
`*_pb1` ones the old path's. Both take the engine's default `pack_weights="auto"` (oneDNN-packed
weights for the layer shapes that measured faster packed on this CPU). On CPU two more engines
run plain `F.linear` everywhere (`pack_weights=False`, the path before packed weights; figures
ending in `_unpacked`) and every layer packed (`pack_weights=True`, the default before "auto";
`_packed_all`). The speedups divide by the best
one-by-one figure of any engine.
Every request generates exactly --tokens tokens (greedy, no stop token); each figure is the best of
--repeat interleaved rounds. The last line is JSON.

    .venv/bin/python bench/inference.py                       # SmolLM2-135M
    .venv/bin/python bench/inference.py --model tiny-qwen3 --tokens 64
    .venv/bin/python bench/inference.py --prefill-batch 1             # only the old path
    python bench/inference.py --device cuda --model tiny-qwen3 --tokens 64   # on a GPU (bench/gpu.sh)
"""

import argparse
import asyncio
import json
import tempfile
import time

import torch

from clawgym.inference.interface import SamplingParams
from clawgym.inference.torch_engine import TorchEngine
from clawgym.policies import load_model, load_tokenizer

TOPICS = [
    "the tides", "prime numbers", "a binary search", "JSON", "photosynthesis", "the Roman roads",
    "compilers", "bees", "a shell pipeline", "volcanoes", "HTTP caching", "chess openings",
    "git rebase", "the moon", "recursion", "coffee", "hash maps", "rainbows", "unit tests",
    "glaciers", "TCP", "sourdough", "regular expressions", "comets", "Python decorators",
    "wind turbines", "SQL joins", "owls", "merge sort", "deserts", "Docker images", "lighthouses",
]  # fmt: skip


def prompts(tok, n: int) -> list[list[int]]:
    """n chat prompts of slightly different lengths (so batching needs padding)."""
    return [
        tok.apply_chat_template(
            [{"role": "user", "content": f"Explain {TOPICS[i % len(TOPICS)]} in a few sentences."}],
            add_generation_prompt=True,
            return_dict=False,
        )
        for i in range(n)
    ]


async def run_requests(
    engine: TorchEngine, batch: list[list[int]], tokens: int, concurrent: bool
) -> tuple[int, float]:
    """(tokens generated, seconds) for `batch`, all at once or one after another."""
    params = SamplingParams(max_new_tokens=tokens, temperature=0.0)

    async def one(prompt: list[int]) -> int:
        return sum([len(chunk.token_ids) async for chunk in engine.generate(prompt, params)])

    start = time.perf_counter()
    if concurrent:
        counts = await asyncio.gather(*(one(p) for p in batch))
    else:
        counts = [await one(p) for p in batch]
    return sum(counts), time.perf_counter() - start


def agent_prompts(tok, samples: int = 8) -> list[list[int]]:
    """A GRPO step's first calls through the reference harness: 4 tasks x `samples` identical prompts."""
    from clawgym.harnesses.reference_agent import build_messages

    tasks = [
        "Create a file named notes.txt containing the text apple.",
        "Make a directory named logs.",
        "Delete the file old.md.",
        "What is 26 + 19? Write the answer into the file report.log.",
    ]
    rendered = [
        tok.apply_chat_template(build_messages(t), add_generation_prompt=True, return_dict=False)
        for t in tasks
    ]
    return [prompt for prompt in rendered for _ in range(samples)]


async def fresh_engine_run(
    model, name: str, batch: list[list[int]], tokens: int, cache_tokens: int, variant: tuple[int, bool | str]
) -> tuple[float, int]:
    """(seconds, prompt tokens computed) for `batch` at once on a fresh engine (an empty prefix cache)."""
    prefill_batch, pack = variant
    engine = TorchEngine(
        model,
        name=name,
        max_batch=32,
        prefix_cache_tokens=cache_tokens,
        prefill_batch=prefill_batch,
        pack_weights=pack,
    )
    try:
        _, seconds = await run_requests(engine, batch, tokens, concurrent=True)
        return seconds, engine.counters().prefill_tokens
    finally:
        await engine.aclose()


def hf_generate(model, tok, batch: list[list[int]], tokens: int) -> tuple[int, float]:
    """(tokens generated, seconds) of transformers' greedy generate on one left-padded batch."""
    padded = tok.pad({"input_ids": batch}, padding=True, return_tensors="pt").to(model.device)
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(
            **padded,
            max_new_tokens=tokens,
            min_new_tokens=tokens,
            do_sample=False,
            pad_token_id=tok.pad_token_id,
        )
    if out.is_cuda:
        torch.cuda.synchronize(out.device)  # the last step's kernels may still be running
    seconds = time.perf_counter() - start
    return (out.shape[1] - padded["input_ids"].shape[1]) * len(batch), seconds


async def bench(args) -> dict:
    dtype = getattr(torch, args.dtype)
    tok = load_tokenizer(args.model)
    model = load_model(args.model, dtype=dtype, device=args.device)
    # suffix -> (prefill_batch, pack_weights): "" is the path under test, "_pb1" one prompt per
    # forward, "_unpacked" plain F.linear (MKL packs the weights on every call), "_packed_all" every
    # layer packed: the old paths
    variants = {"": (args.prefill_batch, "auto")}
    if args.prefill_batch != 1:
        variants["_pb1"] = (1, "auto")
    if args.device == "cpu":
        variants["_unpacked"] = (args.prefill_batch, False)
        variants["_packed_all"] = (args.prefill_batch, True)
    engines = {
        suffix: TorchEngine(
            model, name=args.model, max_batch=32, prefix_cache_tokens=0, prefill_batch=pb, pack_weights=pack
        )
        for suffix, (pb, pack) in variants.items()
    }
    batch = prompts(tok, 32)
    agent = agent_prompts(tok)
    for engine in engines.values():
        await run_requests(engine, batch[:2], 4, concurrent=True)  # warm-up

    # Rounds interleave all measurements (both engines) and keep each one's best, so that load from
    # other processes on a shared machine hits them alike rather than whichever ran during a spike.
    best: dict[str, float] = {}
    steps_32: dict[str, int] = {}
    for _ in range(args.repeat):
        for suffix, engine in engines.items():
            for name, run in (
                ("1", lambda e=engine: run_requests(e, batch[: args.serial], args.tokens, concurrent=False)),
                ("8", lambda e=engine: run_requests(e, batch[:8], args.tokens, concurrent=True)),
                ("32", lambda e=engine: run_requests(e, batch, args.tokens, concurrent=True)),
            ):
                steps_before = engine.counters().decode_steps
                n, seconds = await run()
                if name == "32":
                    steps_32[suffix] = engine.counters().decode_steps - steps_before
                best[name + suffix] = max(best.get(name + suffix, 0.0), n / seconds)
        n, seconds = hf_generate(model, tok, batch, args.tokens)
        best["hf"] = max(best.get("hf", 0.0), n / seconds)
        for suffix, variant in variants.items():
            # the same 32 prompts on the engine as configured by default: prefix cache on, empty at start
            seconds, prefilled = await fresh_engine_run(model, args.model, batch, args.tokens, 8192, variant)
            best["32_cache" + suffix] = max(
                best.get("32_cache" + suffix, 0.0), len(batch) * args.tokens / seconds
            )
            best["32_cache_prefill"] = prefilled
            for cache_tokens in (0, 8192):
                seconds, prefilled = await fresh_engine_run(
                    model, args.model, agent, args.tokens, cache_tokens, variant
                )
                key = f"agent_{cache_tokens}{suffix}"
                best[key] = min(best.get(key, float("inf")), seconds)
                best[f"agent_{cache_tokens}_prefill"] = prefilled

    engine = engines[""]
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)  # a checkpoint as the trainer would publish it
        stream = engine.generate(batch[0], SamplingParams(max_new_tokens=args.tokens, temperature=0.0))
        first = await anext(stream)  # reload while a request is in flight
        reload_s = await engine.load_weights(1, folder)
        versions = first.policy_versions + [v async for c in stream for v in c.policy_versions]
    for each in engines.values():
        await each.aclose()

    tpshf = best["hf"]
    print(
        f"model {args.model} ({args.dtype}), {args.tokens} tokens per request, torch threads {torch.get_num_threads()}"
    )
    result: dict = {
        "model": args.model,
        "dtype": args.dtype,
        "device": args.device,
        "tokens_per_request": args.tokens,
    }
    # One request at a time runs the same path whatever prefill_batch is: the engines' speedups
    # divide by the best one-by-one figure of any, so their ratio is not the baseline's noise.
    tps1 = max(best["1" + suffix] for suffix in variants)
    for suffix, (pb, pack) in variants.items():
        tps8, tps32 = best["8" + suffix], best["32" + suffix]
        off, on = best["agent_0" + suffix], best["agent_8192" + suffix]
        tps32c = best["32_cache" + suffix]
        old = {
            "_pb1": " (the old path: one prompt per forward)",
            "_unpacked": " (the old path: plain F.linear)",
            "_packed_all": " (the old default: every linear layer packed)",
        }
        print(f"-- prefill_batch {pb}, pack_weights {pack}{old.get(suffix, '')}")
        print(
            f"one by one ({args.serial} requests): {best['1' + suffix]:8.1f} tok/s  (baseline: {tps1:.1f}, the best)"
        )
        print(f"8 concurrent:              {tps8:8.1f} tok/s  ({tps8 / tps1:.2f}x)")
        print(
            f"32 concurrent:             {tps32:8.1f} tok/s  ({tps32 / tps1:.2f}x, {steps_32[suffix]} decode steps)"
        )
        print(f"HF generate, padded 32:    {tpshf:8.1f} tok/s  (engine at 32 = {tps32 / tpshf:.2f}x)")
        print(
            f"32 concurrent, prefix cache on (empty at start, {best['32_cache_prefill']:.0f} prompt tokens "
            f"computed): {tps32c:8.1f} tok/s  ({tps32c / tpshf:.2f}x HF generate)"
        )
        print(
            f"agent step, 4 tasks x 8 samples, {len(agent[0])}-token prompts: prefix cache off {off:.2f} s "
            f"({best['agent_0_prefill']:.0f} prompt tokens computed), on {on:.2f} s "
            f"({best['agent_8192_prefill']:.0f}): {off / on:.2f}x"
        )
        result.update(
            {
                f"prefill_batch{suffix}": pb,
                f"pack_weights{suffix}": pack,
                f"tok_s_1{suffix}": round(best["1" + suffix], 2),
                f"tok_s_8{suffix}": round(tps8, 2),
                f"tok_s_32{suffix}": round(tps32, 2),
                f"speedup_8{suffix}": round(tps8 / tps1, 3),
                f"speedup_32{suffix}": round(tps32 / tps1, 3),
                f"vs_hf_generate_32{suffix}": round(tps32 / tpshf, 3),
                f"tok_s_32_prefix_cache{suffix}": round(tps32c, 2),
                f"vs_hf_generate_32_prefix_cache{suffix}": round(tps32c / tpshf, 3),
                f"decode_steps_32{suffix}": steps_32[suffix],
                f"agent_step_s_cache_off{suffix}": round(off, 3),
                f"agent_step_s_cache_on{suffix}": round(on, 3),
                f"prefix_cache_speedup{suffix}": round(off / on, 3),
            }
        )
    if "_pb1" in variants:
        ratio = best["32"] / best["32_pb1"]
        print(f"32 concurrent, batched prefill vs one prompt per forward: {ratio:.2f}x")
        result["batched_prefill_vs_pb1_32"] = round(ratio, 3)
    if "_unpacked" in variants:
        ratio = best["32"] / best["32_unpacked"]
        print(f"32 concurrent, auto-packed vs plain linear weights: {ratio:.2f}x")
        result["packed_vs_unpacked_32"] = round(ratio, 3)
    if "_packed_all" in variants:
        ratio = best["32"] / best["32_packed_all"]
        print(f"32 concurrent, auto-packed vs every layer packed: {ratio:.2f}x")
        result["auto_vs_packed_all_32"] = round(ratio, 3)
    print(f"reload: {reload_s:.3f} s, in-flight request finished with versions {sorted(set(versions))}")
    result.update(
        {
            "tok_s_hf_generate_32": round(tpshf, 2),
            "reload_s": round(reload_s, 4),
            "agent_prefill_tokens_cache_off": int(best["agent_0_prefill"]),
            "agent_prefill_tokens_cache_on": int(best["agent_8192_prefill"]),
            "prefill_tokens_32_prefix_cache": int(best["32_cache_prefill"]),
            "rounds": args.repeat,
        }
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m", help="model spec (default smollm2-135m)")
    parser.add_argument("--tokens", type=int, default=32, help="tokens generated per request")
    parser.add_argument("--serial", type=int, default=4, help="requests in the one-by-one baseline")
    parser.add_argument("--repeat", type=int, default=2, help="rounds; each figure is its best round")
    parser.add_argument(
        "--prefill-batch",
        type=int,
        default=32,
        help="prompts prefilled per forward in the engine under test (default 32); "
        "1 = the old path alone; otherwise it runs side by side with prefill_batch=1",
    )
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N: where the model runs")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(bench(args))))


if __name__ == "__main__":
    main()
