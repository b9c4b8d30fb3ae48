"""The torch engine's sampler on one decode step's logits: today's batched inverse-CDF draw beside
the per-row `torch.multinomial` path it replaced (kept here as the baseline, as it was).

Both sample the same (B, V) float32 logits at T = 0.7 with one seeded generator per row, alternating
in the same rounds; each figure is the median of --rounds. SmolLM2's vocabulary (49,152) and the
quickstart's 32 rows by default. The LAST line is one JSON object.

    .venv/bin/python bench/sampler.py
    .venv/bin/python bench/sampler.py --rows 64 --threads 2
"""

import argparse
import json
import math
import statistics
import time

import torch

from clawgym.inference.interface import SamplingParams
from clawgym.inference.sampler import make_generator, sample_rows, truncate


def per_row_multinomial(logits: torch.Tensor, params: list[SamplingParams], generators: list) -> list[int]:
    """The sampler before batching: log_softmax of the batch, then per row a softmax of its
    (truncated) logprobs and one `torch.multinomial` draw."""
    temps = torch.tensor([p.temperature if p.temperature > 0 else 1.0 for p in params])
    logp = torch.log_softmax(logits / temps[:, None], dim=-1)
    finite = (torch.isfinite(logits).all(dim=-1) & ~torch.isnan(logp).any(dim=-1)).tolist()
    tokens = []
    for row, (p, gen) in enumerate(zip(params, generators, strict=True)):
        if not finite[row]:
            tokens.append(-1)
            continue
        probs = torch.softmax(truncate(logp[row], p.top_k, p.top_p), dim=-1)
        token = int(torch.multinomial(probs, 1, generator=gen))
        tokens.append(token if math.isfinite(float(logp[row, token])) else -1)
    return tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    logits = torch.randn(args.rows, args.vocab, generator=torch.Generator().manual_seed(0)) * 4
    params = [SamplingParams(max_new_tokens=1, temperature=0.7)] * args.rows
    gens = [make_generator(i) for i in range(args.rows)]
    paths = {
        "batched": lambda: sample_rows(logits, params, gens),
        "per_row_multinomial": lambda: per_row_multinomial(logits, params, gens),
    }
    times: dict[str, list[float]] = {name: [] for name in paths}
    for run in paths.values():  # warm-up
        run()
    for _ in range(args.rounds):
        for name, run in paths.items():
            start = time.perf_counter()
            run()
            times[name].append((time.perf_counter() - start) * 1e3)
    ms = {name: statistics.median(t) for name, t in times.items()}
    for name, value in ms.items():
        print(f"{name:>22}: {value:7.2f} ms a step of {args.rows} rows x {args.vocab}")
    figures = {
        "rows": args.rows,
        "vocab": args.vocab,
        "threads": args.threads,
        "batched_ms": round(ms["batched"], 3),
        "per_row_multinomial_ms": round(ms["per_row_multinomial"], 3),
        "speedup": round(ms["per_row_multinomial"] / ms["batched"], 2),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
