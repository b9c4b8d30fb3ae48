"""Store write throughput with 20k-token calls, PostgreSQL vs SQLite, with batches in flight 2 vs 1.

    .venv/bin/python bench/store_write.py [--writers 16] [--calls 50] [--prompt-tokens 20000] [--rounds 1]

Each run gets a fresh database (a throwaway PostgreSQL schema, a temp SQLite file) and an in-process
bus; `--writers` threads share one SqlStore and record `--calls` calls each, all starting together.
The store's one write path (group commit): on PostgreSQL each batch is one execution of a prepared
statement, rows encoded by their callers, `store.pg_batches_in_flight` batches at once (`pg`: 2, the
default; `pg_prepared1`: 1); on SQLite each batch a Core transaction (`sqlite`). With `--rounds N`
they run N times, in alternating order, and each figure is the median, so a loaded machine skews
all alike (compare the ratios, also per round). Per call: the latency of one `record_call` (what the
proxy waits on before the harness's last byte), mean, p50 and p99, and this process's CPU time
(client side: validation, encoding, the threads); per run: calls/s, MB/s, the mean batch size and
the peak growth of this process's RSS while writing. A call's bytes are its packed arrays plus its
JSON; reads are one `get_group` of everything written. The size ratio compares one call's packed
arrays with the same arrays as JSON lists (what the store must never do). The last line is one JSON
object of the figures.
"""

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from sqlalchemy import create_engine, pool, text
from sqlalchemy.engine import make_url

from clawgym import arrays
from clawgym.assemble import open_sql_store
from clawgym.records import Call, RolloutSpec
from clawgym.store.config import StoreConfig

DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def make_calls(rollout_id: str, writer: int, n: int, prompt_tokens: int, output_tokens: int) -> list[Call]:
    rng = np.random.default_rng(writer)
    base = rng.integers(0, 151_000, prompt_tokens, dtype=np.int32)
    calls = []
    for seq in range(n):
        prompt = base.copy()
        prompt[:2] = (writer, seq)  # every call distinct
        calls.append(
            Call(
                rollout_id=rollout_id,
                seq=seq,
                protocol="anthropic_messages",
                request={
                    "model": "policy",
                    "max_tokens": 1024,
                    "messages": [{"role": "user", "content": "x" * 2000}],
                },
                response={"content": [{"type": "text", "text": "y" * 1000}], "stop_reason": "end_turn"},
                prompt_ids=prompt,
                output_ids=rng.integers(0, 151_000, output_tokens, dtype=np.int32),
                output_logprobs=-rng.exponential(1.0, output_tokens).astype(np.float32),
                output_versions=np.full(output_tokens, 3, dtype=np.int32),
                policy_version=3,
                finish_reason="stop",
                latency_s=0.5,
            )
        )
    return calls


def call_bytes(call: Call) -> int:
    packed = (
        arrays.pack_ids(call.prompt_ids),
        arrays.pack_ids(call.output_ids),
        arrays.pack_logprobs(call.output_logprobs),
        arrays.pack_ids(call.output_versions),
    )
    return sum(map(len, packed)) + len(json.dumps(call.request)) + len(json.dumps(call.response))


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakRss:
    """Samples this process's RSS every 5 ms while in the block; `growth` is the peak minus the start."""

    def __enter__(self) -> "PeakRss":
        self.start = self.peak = rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, rss_bytes())

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.growth = max(self.peak, rss_bytes()) - self.start


# A run: (backend, store.pg_batches_in_flight), by its tag in the figures.
RUNS = {"pg": ("postgresql", 2), "pg_prepared1": ("postgresql", 1), "sqlite": ("sqlite", 1)}


def bench_backend(
    url: str, writers: int, calls: int, prompt_tokens: int, output_tokens: int, inflight: int
) -> dict[str, float]:
    config = StoreConfig(url=url, pool_size=writers, pg_batches_in_flight=inflight)
    store = open_sql_store(config)  # bus: memory://
    latencies: list[float] = []
    try:
        run = store.create_run("bench")
        specs = [RolloutSpec("bench-group", f"task{w}", "reference") for w in range(writers)]
        rollouts = [r.rollout_id for r in store.register_rollouts(run.id, specs)]
        work = [make_calls(rollouts[w], w, calls, prompt_tokens, output_tokens) for w in range(writers)]
        total_bytes = sum(call_bytes(c) for batch in work for c in batch)
        start = threading.Barrier(writers + 1)

        def write(batch: list[Call]) -> None:
            start.wait()
            for call in batch:
                t = time.perf_counter()
                store.record_call(call)
                latencies.append(time.perf_counter() - t)  # list.append is atomic

        with ThreadPoolExecutor(writers) as threads, PeakRss() as rss:
            futures = [threads.submit(write, batch) for batch in work]
            start.wait()
            t0, cpu0 = time.perf_counter(), time.process_time()
            for f in futures:
                f.result()
            write_s, cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
        t0 = time.perf_counter()
        group = store.get_group("bench-group")
        read_s = time.perf_counter() - t0
        assert sum(len(r.calls) for r in group.rollouts) == writers * calls, "the store lost calls"
    finally:
        store.close()
    n = writers * calls
    cuts = statistics.quantiles(latencies, n=100)
    return {
        "calls_per_s": n / write_s,
        "mb_per_s": total_bytes / write_s / 1e6,
        "read_mb_per_s": total_bytes / read_s / 1e6,
        "write_s": write_s,
        "mean_ms": statistics.fmean(latencies) * 1e3,
        "cpu_ms": cpu_s / n * 1e3,
        "p50_ms": cuts[49] * 1e3,
        "p99_ms": cuts[98] * 1e3,
        "mean_batch": store.call_batcher.items / store.call_batcher.batches
        if store.call_batcher.batches
        else 1.0,
        "rss_growth_mb": rss.growth / 1e6,
    }


def median_of(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def with_pg_schema(base_url: str, fn):  # type: ignore[no-untyped-def]
    """Runs fn(url) on a throwaway schema of base_url's database."""
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    admin = create_engine(base_url, poolclass=pool.NullPool)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        url = make_url(base_url).update_query_dict({"options": f"-csearch_path={schema}"})
        return fn(url.render_as_string(hide_password=False))
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


def size_ratio(prompt_tokens: int, output_tokens: int) -> tuple[int, int]:
    """(packed bytes, JSON-list bytes) of one call's arrays."""
    (call,) = make_calls("r", 0, 1, prompt_tokens, output_tokens)
    fields = (call.prompt_ids, call.output_ids, call.output_logprobs, call.output_versions)
    packed = call_bytes(call) - len(json.dumps(call.request)) - len(json.dumps(call.response))
    as_json = sum(len(json.dumps(a.tolist())) for a in fields)
    return packed, as_json


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", type=int, default=16, help="concurrent writer threads")
    parser.add_argument("--calls", type=int, default=50, help="calls per writer")
    parser.add_argument("--prompt-tokens", type=int, default=20_000)
    parser.add_argument("--output-tokens", type=int, default=256)
    parser.add_argument(
        "--pg-url",
        default=os.environ.get("CLAWGYM_TEST_PG_URL", DEFAULT_PG_URL),
        help="a database to bench in",
    )
    parser.add_argument("--rounds", type=int, default=1, help="alternate the runs N times; medians")
    args = parser.parse_args()
    shape = (args.writers, args.calls, args.prompt_tokens, args.output_tokens)

    results: dict[str, list[dict[str, float]]] = {}
    for round_ in range(args.rounds):
        for tag in RUNS if round_ % 2 == 0 else list(RUNS)[::-1]:  # none always runs first
            backend, inflight = RUNS[tag]
            if backend == "postgresql":
                run = with_pg_schema(args.pg_url, lambda url, n=inflight: bench_backend(url, *shape, n))
            else:
                with tempfile.TemporaryDirectory() as tmp:
                    run = bench_backend(f"sqlite:///{tmp}/bench.db", *shape, inflight)
            results.setdefault(tag, []).append(run)
    r = {tag: median_of(runs) for tag, runs in results.items()}
    packed, as_json = size_ratio(args.prompt_tokens, args.output_tokens)

    print(
        f"{args.writers} writers × {args.calls} calls, {args.prompt_tokens}-token prompts, {args.output_tokens} out"
        f", median of {args.rounds} round(s)"
    )
    for tag, x in r.items():
        print(
            f"  {tag:12s} {x['calls_per_s']:7.1f} calls/s {x['mb_per_s']:6.1f} MB/s"
            f"  record_call mean {x['mean_ms']:6.1f} p50 {x['p50_ms']:6.1f} p99 {x['p99_ms']:6.1f} ms"
            f"  CPU {x['cpu_ms']:4.2f} ms/call  batch {x['mean_batch']:4.1f}  RSS +{x['rss_growth_mb']:5.0f} MB"
            f"  group read {x['read_mb_per_s']:6.1f} MB/s ({x['write_s']:.1f} s)"
        )
    print(f"  one call's arrays: packed {packed / 1e3:.0f} kB, as JSON lists {as_json / 1e3:.0f} kB")
    figures: dict[str, float | int | list[float]] = {}
    for tag, x in r.items():
        figures |= {
            f"{tag}_calls_per_s": round(x["calls_per_s"], 1),
            f"{tag}_mb_per_s": round(x["mb_per_s"], 1),
            f"{tag}_mean_ms": round(x["mean_ms"], 1),
            f"{tag}_cpu_ms": round(x["cpu_ms"], 2),
            f"{tag}_p50_ms": round(x["p50_ms"], 1),
            f"{tag}_p99_ms": round(x["p99_ms"], 1),
            f"{tag}_mean_batch": round(x["mean_batch"], 1),
            f"{tag}_rss_growth_mb": round(x["rss_growth_mb"]),
            f"{tag}_group_read_mb_per_s": round(x["read_mb_per_s"], 1),
        }
    # two batches in flight vs one, from the medians and round by round (a round's runs are adjacent)
    figures["pg_vs_prepared1_calls_s"] = round(r["pg"]["calls_per_s"] / r["pg_prepared1"]["calls_per_s"], 2)
    figures["pg_vs_prepared1_calls_s_by_round"] = [
        round(a["calls_per_s"] / b["calls_per_s"], 2)
        for a, b in zip(results["pg"], results["pg_prepared1"], strict=True)
    ]
    figures["pg_vs_sqlite_calls"] = round(r["pg"]["calls_per_s"] / r["sqlite"]["calls_per_s"], 2)
    figures |= {
        "packed_vs_json_size": round(packed / as_json, 3),
        "writers": args.writers,
        "calls_per_writer": args.calls,
        "prompt_tokens": args.prompt_tokens,
        "output_tokens": args.output_tokens,
        "rounds": args.rounds,
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
