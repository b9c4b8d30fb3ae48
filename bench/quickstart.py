"""Wall time of each stage of `clawgym quickstart` and its held-out Pass@1 before/after (for new
instances of the trained families and for the families never trained on, and per family).

Runs the real quickstart (the installed `clawgym` CLI, embedded mode, CPU) once with the given
options, then reads its run folder: stage times, per-step times (rollouts vs update), rollout and
token throughput, Pass@1 before/after with 95% intervals and the paired difference, and the peak
resident memory of the run, sampled every 0.5 s over the quickstart process and every process under
it (sandboxes included): `peak_rss_gb` sums their PSS (each shared page counted once, split between
its processes), `peak_rss_sum_gb` their plain RSS (shared pages once per process: an upper bound),
`peak_rss_main_gb` is the main process's own.

    .venv/bin/python bench/quickstart.py                       # the defaults (SmolLM2-135M, the 15-min budget)
    .venv/bin/python bench/quickstart.py -- --model tiny-qwen3 --steps 2 --eval-tasks 8   # a smoke run

It first waits (`--quiet-wait`, 300 s at most) for the 1-minute load average to fall below half
the cores: a run just before leaves it near 2 on 2 cores for a minute or two, and the quickstart's auto
threads read it. Arguments after `--` go to `clawgym quickstart` unchanged. The LAST line is one JSON
object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from clawgym_app.logs import machine_busy

CLAWGYM = Path(sys.executable).with_name("clawgym")


class MemorySampler(threading.Thread):
    """Peaks, over a run, of the memory of a process and its descendants: the summed proportional set
    size (PSS: resident pages, each shared page split between the processes mapping it, so the
    sandboxes' shared interpreter counts once), the plain RSS sum (shared pages once per process: an
    upper bound), and the process's own RSS."""

    def __init__(self, pid: int, interval_s: float = 0.5) -> None:
        super().__init__(daemon=True)
        import psutil

        self.root = psutil.Process(pid)
        self.interval_s = interval_s
        self.peak_pss = self.peak_rss_sum = self.peak_main = 0
        self.done = threading.Event()

    def run(self) -> None:
        import psutil

        while not self.done.wait(self.interval_s):
            try:
                processes = [self.root, *self.root.children(recursive=True)]
            except psutil.NoSuchProcess:
                return
            pss = rss = main = 0
            for process in processes:
                with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):  # ended meanwhile
                    info = process.memory_full_info()  # /proc/PID/smaps_rollup: ~2 ms a process
                    pss, rss = pss + info.pss, rss + info.rss
                    main = info.rss if process is self.root else main
            self.peak_pss = max(self.peak_pss, pss)
            self.peak_rss_sum = max(self.peak_rss_sum, rss)
            self.peak_main = max(self.peak_main, main)


def step_figures(db: Path) -> list[dict]:
    """Per-step metrics the trainer committed with each checkpoint."""
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT version, metrics FROM checkpoints ORDER BY version").fetchall()
    return [{"step": v, **json.loads(m)} for v, m in rows]


def rollout_figures(db: Path) -> dict:
    """Rollouts, calls and generated tokens recorded by the run, and mean per-call latency."""
    with sqlite3.connect(db) as c:
        rollouts = c.execute("SELECT count(*) FROM rollouts WHERE status = 'finished'").fetchone()[0]
        calls, out_bytes, prompt_bytes, latency = c.execute(
            "SELECT count(*), sum(length(output_ids)), sum(length(prompt_ids)), avg(latency_s) FROM calls"
        ).fetchone()
    return {
        "rollouts": rollouts,
        "calls": calls,
        "generated_tokens": (out_bytes or 0) // 4,  # int32 ids, packed
        "prompt_tokens": (prompt_bytes or 0) // 4,
        "mean_call_latency_s": round(latency or 0.0, 2),
    }


def wait_for_quiet(limit_s: float) -> float:
    """Waits (up to `limit_s`) until the quickstart's auto threads would count the machine as quiet
    (`machine_busy`: a run just before leaves the load average ~2 on 2 cores for a minute or two);
    returns the seconds waited."""
    started = time.monotonic()
    while machine_busy() and time.monotonic() - started < limit_s:
        time.sleep(5)
    return time.monotonic() - started


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run-dir", default="", help="keep the run folder here (default: a temp folder)")
    p.add_argument("--quiet-wait", type=float, default=300, help="seconds to wait for a quiet machine first")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="-- then options for clawgym quickstart")
    args = p.parse_args()
    extra = [a for a in args.rest if a != "--"]
    run_dir = Path(args.run_dir or tempfile.mkdtemp(prefix="clawgym-quickstart-"))
    waited = wait_for_quiet(args.quiet_wait)
    print(f"waited {waited:.0f} s for the load average to fall (now {os.getloadavg()[0]:.2f})", flush=True)
    started = time.monotonic()
    proc = subprocess.Popen(
        [str(CLAWGYM), "quickstart", "--run-dir", str(run_dir), "--json", *extra],
        stdout=subprocess.PIPE, stderr=None, text=True, env=os.environ,
    )  # fmt: skip
    sampler = MemorySampler(proc.pid)
    sampler.start()
    stdout, _ = proc.communicate()
    sampler.done.set()
    sampler.join()
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"clawgym quickstart failed with {proc.returncode}")
    result = json.loads(stdout.strip().splitlines()[-1])
    steps = step_figures(run_dir / "clawgym.db")
    counts = rollout_figures(run_dir / "clawgym.db")
    stages = result["stages_s"]
    total = sum(stages.values())
    print(f"{'stage':22} {'seconds':>8} {'share':>6}")
    for name, seconds in stages.items():
        print(f"{name:22} {seconds:8.1f} {100 * seconds / total:5.0f}%")
    print(f"\n{'step':>4} {'reward':>7} {'rollouts s':>10} {'update s':>9} {'step s':>7} {'tokens':>7}")
    for s in steps:
        print(f"{s['step']:4d} {s['reward']:7.3f} {s['rollout_wait_s']:10.1f} {s['update_s']:9.1f} "
              f"{s['rollout_wait_s'] + s['step_s']:7.1f} {s['tokens']:7d}")  # fmt: skip
    rollout_s = sum(s["rollout_wait_s"] for s in steps)
    update_s = sum(s["step_s"] for s in steps)
    for suffix, what in (("", "trained families"), ("_unseen_families", "unseen families")):
        if result.get(f"pass1_before{suffix}") is not None and result.get(f"pass1_after{suffix}") is not None:
            print(f"Pass@1, {what}: before {result[f'pass1_before{suffix}']:.3f} {result[f'ci95_before{suffix}']}  "
                  f"after {result[f'pass1_after{suffix}']:.3f} {result[f'ci95_after{suffix}']}  "
                  f"difference {result.get(f'delta{suffix}', float('nan')):+.3f} {result.get(f'ci95_delta{suffix}')}"
                  f" (over families {result.get(f'ci95_delta{suffix}_by_family')})")  # fmt: skip
    keys = ("pass1_before", "pass1_after", "ci95_before", "ci95_after", "delta", "ci95_delta", "significant")
    figures = {
        **{k: result.get(k) for k in keys},
        **{f"{k}_unseen_families": result.get(f"{k}_unseen_families") for k in keys},
        "ci95_delta_by_family": result.get("ci95_delta_by_family"),
        "ci95_delta_unseen_families_by_family": result.get("ci95_delta_unseen_families_by_family"),
        "label_unseen_families": result.get("label_unseen_families"),
        **{k: result.get(k) for k in ("steps", "eval_tasks", "eval_tasks_unseen_families", "minutes")},
        "per_family": result.get("per_family"),
        "wall_s": round(wall, 1),
        "peak_rss_gb": round(sampler.peak_pss / 2**30, 2),
        "peak_rss_sum_gb": round(sampler.peak_rss_sum / 2**30, 2),
        "peak_rss_main_gb": round(sampler.peak_main / 2**30, 2),
        "stages_s": stages,
        "rollout_vs_update_time": round(rollout_s / update_s, 2) if update_s else None,
        "mean_step_s": round((rollout_s + update_s) / len(steps), 1) if steps else None,
        "rollouts_per_min": round(60 * counts["rollouts"] / wall, 1),
        **counts,
        "run_dir": str(run_dir),
    }  # fmt: skip
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
