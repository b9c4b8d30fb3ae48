"""The torch engine alone on the model calls a run made: how fast it serves exactly that load.

Replays a run folder's recorded calls of the initial policy (version 0: the evaluation before
training, then the first steps' rollouts, in the order they were made) through a fresh engine built
from the run's config.yaml (`inference`: model, dtype, prefix cache, packing budget, KV budget;
`--set` changes them), each call with its recorded prompt ids, its recorded temperature and exactly
its recorded number of new tokens (no stop token), `--concurrency` calls at once. Nothing else runs
(no proxy, sandbox, harness or trainer), so what the run's own calls took beyond this is what the
rest of the run took from the engine. One arm per `--concurrency` value (and per value of the
field `--compare` names); arms alternate in rounds, each on a fresh engine (its prefix cache
empty), and each keeps its best round.

    .venv/bin/python bench/engine_replay.py --run-dir runs/<name> [--calls 288] [--concurrency 32 64] [--rounds 1]
    .venv/bin/python bench/engine_replay.py --run-dir runs/<name> --set inference.pack_weights_mb=0   # other settings
    .venv/bin/python bench/engine_replay.py --run-dir runs/<name> --compare inference.shared_prefix_tokens=0,64

The LAST line is one JSON object: per arm `wall_s`, `cpu_s` (the process's), `decode_steps`,
`rows_per_step`, `shared_rows`, `kv_mb_peak`, `prefill_forwards`, `prefill_tokens`, `prefix_hit_tokens`, `prefix_row_tokens` (read from a running shared prefix), `tokens_per_s`, and `speedup` over the first arm.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

from clawgym.config import load_config
from clawgym.inference.factory import create_engine
from clawgym.inference.interface import SamplingParams
from clawgym.records import Call
from clawgym.report.run_folder import store_url
from clawgym.store.sql import SqlStore


def initial_calls(run_dir: Path, limit: int) -> list[Call]:
    """The first `limit` calls (by time) served by version 0, over every run in the folder's store."""
    store = SqlStore(store_url(run_dir))
    try:
        calls = [
            call
            for run in store.list_runs()
            for rollout in store.list_rollouts(run.id)
            for call in store.list_calls(rollout.id)
            if call.policy_version == 0
        ]
    finally:
        store.close()
    return sorted(calls, key=lambda c: c.created_at)[:limit]


async def replay(run_dir: Path, calls: list[Call], concurrency: int, sets: list[str]) -> dict:
    """One round: a fresh engine (the run's `inference` settings, `sets` over them) serves `calls`,
    `concurrency` at once; its figures."""
    config = load_config(run_dir / "config.yaml", sets=sets)
    settings, temperature = config.inference, config.proxy.temperature
    if settings.engine != "torch":
        raise SystemExit(f"{run_dir}: its engine is {settings.engine}; this replays the torch engine")
    # files: a replay has no trainer to lend its weights; room for every call at once
    engine = create_engine(
        settings.model_copy(
            update={"weight_sync": "files", "max_batch": max(settings.max_batch, concurrency)}
        )
    )
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int, call: Call) -> None:
        params = SamplingParams(
            max_new_tokens=max(1, len(call.output_ids)),
            temperature=temperature if call.temperature is None else call.temperature,
            seed=i,
        )
        async with gate:
            async for _ in engine.generate(call.prompt_ids, params):
                pass

    try:
        before, wall, cpu = engine.counters(), time.perf_counter(), time.process_time()
        await asyncio.gather(*(one(i, c) for i, c in enumerate(calls)))
        wall, cpu, after = time.perf_counter() - wall, time.process_time() - cpu, engine.counters()
    finally:
        await engine.aclose()
    steps = after.decode_steps - before.decode_steps
    generated = sum(max(1, len(c.output_ids)) for c in calls)
    return {
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "decode_steps": steps,
        "rows_per_step": round((after.decode_rows - before.decode_rows) / max(1, steps), 1),
        "shared_rows": after.shared_rows - before.shared_rows,
        "kv_mb_peak": round(after.kv_bytes_peak / 2**20),
        "prefill_forwards": after.prefill_forwards - before.prefill_forwards,
        "prefill_tokens": after.prefill_tokens - before.prefill_tokens,
        "prefix_hit_tokens": after.prefix_hit_tokens - before.prefix_hit_tokens,
        "prefix_row_tokens": after.prefix_row_tokens - before.prefix_row_tokens,
        "tokens_per_s": round(generated / wall, 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run-dir", type=Path, required=True, help="a run folder (config.yaml, clawgym.db)")
    p.add_argument(
        "--calls",
        type=int,
        default=288,
        help="the first N calls of version 0 (288: a quickstart's evaluation)",
    )
    p.add_argument("--concurrency", type=int, nargs="+", default=[32], help="calls at once, one arm each")
    p.add_argument("--rounds", type=int, default=1, help="rounds; each arm keeps its best")
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config field over the run's, for every arm (--set inference.pack_weights_mb=0)",
    )
    p.add_argument(
        "--compare",
        metavar="KEY=V1,V2",
        help="one arm per value of a config field (--compare inference.shared_prefix_tokens=0,64)",
    )
    args = p.parse_args()
    variants = [("", [])]
    if args.compare:
        key, _, values = args.compare.partition("=")
        variants = [(f" {key}={v}", [f"{key}={v}"]) for v in values.split(",")]
    arms = [(f"{c}{name}", c, sets) for c in args.concurrency for name, sets in variants]
    calls = initial_calls(args.run_dir, args.calls)
    if not calls:
        raise SystemExit(f"{args.run_dir}: no calls of version 0 recorded")
    print(f"{len(calls)} calls: {sum(len(c.prompt_ids) for c in calls)} prompt tokens, "
          f"{sum(len(c.output_ids) for c in calls)} generated", flush=True)  # fmt: skip
    best: dict[str, dict] = {}
    for r in range(args.rounds):
        for label, concurrency, sets in arms if r % 2 == 0 else arms[::-1]:
            figures = asyncio.run(replay(args.run_dir, calls, concurrency, [*args.sets, *sets]))
            print(f"round {r + 1}, {label} (at once): {json.dumps(figures)}", flush=True)
            if label not in best or figures["wall_s"] < best[label]["wall_s"]:
                best[label] = figures
    first = best[arms[0][0]]["wall_s"]
    figures = {label: {**best[label], "speedup": round(first / best[label]["wall_s"], 2)} for label, _, _ in arms}
    print(json.dumps({"calls": len(calls), "arms": figures}))


if __name__ == "__main__":
    main()
