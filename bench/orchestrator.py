"""Orchestrator overhead per rollout: the orchestrator vs the bare sandbox sequence, side by side.

    .venv/bin/python bench/orchestrator.py [--n 40]

Both arms run the nop harness on the same bundled mini-suite task in local bubblewrap sandboxes:

- bare: `clawgym.orchestrator.attempt.run_task` (no store) — create sandbox, put the task in, run the harness,
  copy the tests in, run the verifier, destroy. No store, no limits, no statuses.
- orchestrator: `Orchestrator.run_rollouts` — the same sequence plus registering the rollouts
  (one batch write), start/finish records in an SQLite store (the embedded mode's), limits,
  status stream, metrics.

Sequential (concurrency 1) gives the per-rollout overhead of the orchestrator (ms and ratio);
concurrency 2 and 8 give rollouts/min on this machine. Mean phase timings come from the
orchestrator's own records. The LAST line is one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from clawgym.assemble import build_orchestrator, open_sql_store
from clawgym.config import ClawgymConfig
from clawgym.harnesses.pseudo import Nop
from clawgym.orchestrator.attempt import run_task
from clawgym.orchestrator.interface import Batch, RolloutRequest
from clawgym.sandbox import make_sandbox_backend
from clawgym.store.config import StoreConfig
from clawgym.store.sql import SqlStore
from clawgym.tasks.loader import load_tasks
from clawgym.tasks.suites import resolve_suite


def sandbox_settings(root: str) -> dict:
    return {"owner": "bench-orchestrator", "local": {"root_dir": root, "isolation": "bwrap"}}


async def bare(task, root: str, n: int) -> float:
    """Seconds per rollout of the bare sequence, one at a time."""
    cfg = ClawgymConfig(sandbox=sandbox_settings(root))
    backend = make_sandbox_backend(cfg.sandbox)
    start = time.perf_counter()
    for _ in range(n):
        outcome = await run_task(Nop(), task, backend)
        assert outcome.verdict.reward == 0.0, "nop never solves a mini task"
    per = (time.perf_counter() - start) / n
    await backend.close()
    return per


async def orchestrated(task, root: str, store: SqlStore, n: int, concurrency: int) -> tuple[float, dict]:
    """(seconds of wall time per rollout, mean phase timings) for n nop rollouts at `concurrency`."""
    cfg = ClawgymConfig(sandbox=sandbox_settings(root), orchestrator={"max_concurrent_rollouts": concurrency})
    orch = build_orchestrator(cfg, store)
    await orch.start()
    run = store.create_run(f"bench-c{concurrency}")
    batch = Batch(run.id, [RolloutRequest(task.id, "nop", samples=n)])
    start = time.perf_counter()
    finals = [s async for s in orch.run_rollouts(batch) if s.ended]
    wall = time.perf_counter() - start
    await orch.close()
    assert len(finals) == n and all(s.state == "finished" for s in finals), "every rollout finished"
    phases = ("sandbox_start_s", "setup_s", "harness_s", "verify_s", "destroy_s", "total_s")
    means = {p: statistics.fmean(s.timings[p] for s in finals) for p in phases}
    return wall / n, means


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=40, help="rollouts per arm")
    args = ap.parse_args()
    task = next(t for t in load_tasks(resolve_suite("mini"), split="train"))
    root = tempfile.mkdtemp(prefix="clawgym-bench-orch-")
    os.chmod(root, 0o711)
    store = open_sql_store(StoreConfig(url=f"sqlite:///{Path(root) / 'store.db'}"))

    await bare(task, root, 3)  # warm-up: page cache, bwrap probe
    base = await bare(task, root, args.n)
    seq, phases = await orchestrated(task, root, store, args.n, 1)
    # the bare arm again, interleaved, so machine-load drift shows up as spread, not as overhead
    base2 = await bare(task, root, args.n)
    base = (base + base2) / 2
    rates = {}
    for c in (2, 8):
        per, _ = await orchestrated(task, root, store, max(args.n, 4 * c), c)
        rates[c] = 60 / per
    store.close()

    print(f"task {task.id}, nop harness, sqlite store, {os.cpu_count()} CPUs, n={args.n}")
    print(f"bare sequence      {base * 1000:8.1f} ms/rollout (sequential)")
    print(f"orchestrator       {seq * 1000:8.1f} ms/rollout (sequential)")
    print(f"overhead           {(seq - base) * 1000:8.1f} ms/rollout  (x{seq / base:.2f})")
    print("orchestrator phases (mean ms): " + ", ".join(f"{k} {v * 1000:.1f}" for k, v in phases.items()))
    for c, rate in rates.items():
        print(f"concurrency {c:2d}     {rate:8.0f} rollouts/min")
    figures = {
        "bare_ms_per_rollout": round(base * 1000, 1),
        "orchestrator_ms_per_rollout": round(seq * 1000, 1),
        "overhead_ms_per_rollout": round((seq - base) * 1000, 1),
        "overhead_ratio": round(seq / base, 3),
        "rollouts_per_min_c2": round(rates[2]),
        "rollouts_per_min_c8": round(rates[8]),
        **{f"mean_{k.removesuffix('_s')}_ms": round(v * 1000, 1) for k, v in phases.items()},
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    asyncio.run(main())
