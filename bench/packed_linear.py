"""One decode step of the policy with its linear weights packed once for oneDNN (the engine's
path, `clawgym.inference.packed_linear`) beside the plain `F.linear` (MKL packs on every call), and
beside the engine's default, "auto": only the layers whose shape measured faster packed on this
CPU (`layers_worth_packing`, at the largest --rows).

For each batch size, B rows hold a --context-token KV cache (the engine's `BatchKVCache`) and take one token each; the three paths
alternate in the same rounds on the same model and cache, and each figure is the median of
--rounds. Also reported: the largest logit difference between the paths, and how long packing the
whole model takes (what a hot reload adds). The LAST line is one JSON object.

    .venv/bin/python bench/packed_linear.py                       # SmolLM2-135M, the quickstart's policy
    .venv/bin/python bench/packed_linear.py --threads 2 --rows 1 8 32 64
"""

import argparse
import inspect
import json
import statistics
import time

import torch
from transformers import DynamicCache

from clawgym.inference.checkpoint import weight_targets
from clawgym.inference.kv_cache import BatchKVCache
from clawgym.inference.packed_linear import PackedLinears, layers_worth_packing
from clawgym.policies import load_model


def one_batch(
    model, packs: dict[str, PackedLinears], rows: int, context: int, rounds: int, gen
) -> dict[str, float]:
    """The paths (plain, and each of `packs`) on one decode step of `rows` rows over the engine's own KV cache of `context`
    columns (one real prompt's keys and values in every row), alternating."""
    config = model.config.get_text_config()
    prompt = DynamicCache()
    model(input_ids=torch.randint(config.vocab_size, (1, context), generator=gen), past_key_values=prompt)

    def rows_of(t: torch.Tensor) -> torch.Tensor:  # (1, H, context, D) -> (rows, H, context + 1, D)
        return torch.cat([t, t[:, :, -1:]], dim=2).expand(rows, -1, -1, -1).contiguous()

    keys = [rows_of(layer.keys) for layer in prompt.layers]
    values = [rows_of(layer.values) for layer in prompt.layers]
    cache = BatchKVCache(keys, values, 0, context, [context] * rows)
    step = torch.randint(config.vocab_size, (rows, 1), generator=gen)
    positions = torch.full((rows, 1), context)
    mask = cache.decode_mask(torch.float32)
    cache_kwarg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

    def decode(path: str) -> torch.Tensor:
        for pack in packs.values():
            pack.release()  # F.linear on every thread...
        if path in packs:
            packs[path].own_thread()  # ...but this path's packed layers
        # not advanced: every round writes the same column over the same cache
        kwargs = {cache_kwarg: cache.hf_cache()}
        out = model(input_ids=step, position_ids=positions, attention_mask=mask, logits_to_keep=1, **kwargs)
        return out.logits[:, -1]

    plain = decode("plain")  # also the warm-up
    diff = max((decode(path) - plain).abs().max().item() for path in packs)
    times: dict[str, list[float]] = {"plain": [], **{path: [] for path in packs}}
    for _ in range(rounds):
        for name in times:
            t = time.perf_counter()
            decode(name)
            times[name].append(time.perf_counter() - t)
    ms = {name: statistics.median(ts) * 1e3 for name, ts in times.items()}
    print(
        f"rows {rows:3d}: plain {ms['plain']:7.1f} ms  packed {ms['packed']:7.1f} ms  {ms['plain'] / ms['packed']:.2f}x"
        f"  auto {ms['auto']:7.1f} ms  {ms['plain'] / ms['auto']:.2f}x  max |logit diff| {diff:.2e}"
    )
    return {
        f"plain_ms_{rows}": round(ms["plain"], 2),
        f"packed_ms_{rows}": round(ms["packed"], 2),
        f"speedup_{rows}": round(ms["plain"] / ms["packed"], 3),
        f"auto_ms_{rows}": round(ms["auto"], 2),
        f"auto_speedup_{rows}": round(ms["plain"] / ms["auto"], 3),
        f"auto_vs_packed_{rows}": round(ms["packed"] / ms["auto"], 3),
        f"max_logit_diff_{rows}": diff,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--context", type=int, default=512, help="tokens already in each row's KV cache")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = load_model(args.model).eval()
    started = time.perf_counter()
    targets = weight_targets(model)[0]
    packed = PackedLinears(model, targets, rows_hint=max(args.rows))
    figures: dict[str, float] = {
        "layers_packed": len(packed.layers),
        "pack_s": round(time.perf_counter() - started, 3),
    }
    started = time.perf_counter()
    chosen = layers_worth_packing(model, max(args.rows))
    auto = PackedLinears(model, targets, rows_hint=max(args.rows), layers=chosen)
    figures |= {
        "auto_layers_packed": len(chosen),
        "auto_choose_and_pack_s": round(time.perf_counter() - started, 3),
    }
    gen = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for rows in args.rows:
            figures |= one_batch(
                model, {"packed": packed, "auto": auto}, rows, args.context, args.rounds, gen
            )
    print(json.dumps({"model": args.model, "threads": args.threads, "context": args.context, **figures}))


if __name__ == "__main__":
    main()
