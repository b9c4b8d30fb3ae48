"""What opencode's JavaScript garbage collector costs a small machine while the policy answers it:
rollouts through the real opencode CLI with one GC marking thread (`harness_settings.opencode.
gc_markers: 1`, the default) against its engine's own count (`gc_markers: 0`).

    .venv/bin/python bench/opencode_gc.py [--tasks 8] [--rounds 1] [--concurrency 8]

Each round evaluates the same held-out mini-suite tasks through opencode once per setting, in
alternating order, with `clawgym eval` and the real policy (SmolLM2-135M, its ~7.7k-token first call:
opencode waits tens of seconds on each call on 2 cores). While an evaluation runs, the CPU time of
every opencode process under it is read with psutil (its sandbox hides it from the evaluation's own
rusage); a process's last reading is its CPU. Per setting: opencode's CPU seconds per rollout, the evaluation's
wall seconds per rollout, and Pass@1 (the policy's, not the point here). `cpu_ratio` = the engine
default's CPU per rollout / one marker's, `wall_ratio` the same for wall time. The LAST line is one
JSON object of the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

CLAWGYM = Path(sys.executable).with_name("clawgym")
SETTINGS = {"one marker": 1, "engine default": 0}  # name → gc_markers


def opencode_cpu(root: int, stop: threading.Event, seen: dict[int, float]) -> None:
    """Until `stop`: the CPU seconds (user + system) of each opencode process under `root`, its last
    reading kept."""
    import psutil

    while not stop.wait(0.25):
        try:
            processes = psutil.Process(root).children(recursive=True)
        except psutil.NoSuchProcess:
            return  # the evaluation ended
        for process in processes:
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):  # ended meanwhile
                if process.name() == "opencode":
                    times = process.cpu_times()
                    seen[process.pid] = times.user + times.system


def one_eval(markers: int, args: argparse.Namespace, store: Path) -> dict:
    """`clawgym eval` through opencode with `gc_markers` = `markers`; its figures."""
    settings = {"opencode": {"gc_markers": markers}}
    argv = [str(CLAWGYM), "eval", "--model", args.model, "-H", "opencode", "--tasks", str(args.tasks),
            "--set", f"orchestrator.harness_settings={json.dumps(settings)}",
            "--set", f"orchestrator.harness_concurrency={json.dumps({'opencode': args.concurrency})}",
            "--set", f"proxy.max_new_tokens={args.max_new_tokens}",
            # followers wait for the first prompt's prefix instead of each computing opencode's 7.7k tokens
            "--set", "inference.prefix_cache_tokens=8192",
            "--store", f"sqlite:///{store}", "--json"]  # fmt: skip
    seen: dict[int, float] = {}
    stop = threading.Event()
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as run:
        sampler = threading.Thread(target=opencode_cpu, args=(run.pid, stop, seen), daemon=True)
        sampler.start()
        try:
            stdout, stderr = run.communicate()
        finally:
            stop.set()
            sampler.join()
    if run.returncode != 0:
        raise SystemExit(f"clawgym eval (gc_markers {markers}) failed:\n{stdout[-2000:]}\n{stderr[-3000:]}")
    out = json.loads(stdout.strip().splitlines()[-1])
    m = out["harnesses"]["opencode"]
    return {"seconds": out["seconds"], "rollouts": m["samples"], "pass1": m["pass@1"],
            "processes": len(seen), "cpu_s": sum(seen.values())}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=8, help="held-out mini tasks per evaluation")
    p.add_argument("--rounds", type=int, default=1, help="evaluations per setting, alternating order")
    p.add_argument("--concurrency", type=int, default=8, help="opencode runs at once")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--max-new-tokens", type=int, default=64)
    args = p.parse_args()
    runs: dict[str, list[dict]] = {name: [] for name in SETTINGS}
    order = list(SETTINGS)
    with tempfile.TemporaryDirectory(prefix="clawgym-opencode-gc-") as tmp:
        for r in range(args.rounds):
            for name in order if r % 2 == 0 else order[::-1]:
                figures = one_eval(SETTINGS[name], args, Path(tmp) / f"{SETTINGS[name]}-{r}.db")
                runs[name].append(figures)
                print(f"round {r + 1} {name:15} {figures['cpu_s'] / figures['rollouts']:.1f} s of opencode CPU and "
                      f"{figures['seconds'] / figures['rollouts']:.1f} s wall a rollout ({figures['processes']} "
                      f"processes seen), Pass@1 {figures['pass1']:.2f}", flush=True)  # fmt: skip
    summary = {}
    for name, rs in runs.items():
        n = sum(x["rollouts"] for x in rs)
        summary[name.replace(" ", "_")] = {
            "gc_markers": SETTINGS[name],
            "cpu_s_per_rollout": round(sum(x["cpu_s"] for x in rs) / n, 2),
            "s_per_rollout": round(sum(x["seconds"] for x in rs) / n, 2),
            "pass1": round(sum(x["pass1"] * x["rollouts"] for x in rs) / n, 3),
        }
    one, default = summary["one_marker"], summary["engine_default"]
    print(json.dumps({
        "model": args.model, "tasks": args.tasks, "rounds": args.rounds, "concurrency": args.concurrency, **summary,
        "cpu_ratio": round(default["cpu_s_per_rollout"] / one["cpu_s_per_rollout"], 2),
        "wall_ratio": round(default["s_per_rollout"] / one["s_per_rollout"], 2),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
