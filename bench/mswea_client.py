"""What a rollout through mini-swe-agent costs with each of its clients: litellm (its default) and
`direct` (its own OpenRouter model classes pointed at the proxy, `harness_settings.client`).

    .venv/bin/python bench/mswea_client.py [--tasks 16] [--rounds 2] [--mode text]

Each round evaluates the same held-out mini-suite tasks through the real mini-swe-agent CLI once
per client, in alternating order (litellm, direct; then direct, litellm), with `clawgym eval` and
the oracle teacher answering every call (`proxy.teacher.kind=oracle`: no policy compute, so what is
measured is the harness, its sandbox and the verifier). Per client: the evaluation's wall seconds
per rollout (its `seconds`, the runtime's start left out), the median rollout's `harness_s`
(a run's wall time inside its sandbox, at `--concurrency` runs at once) and Pass@1, which must be
1 for both. `speedup` = litellm's wall per rollout / direct's. The LAST line is one JSON object of
the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CLAWGYM = Path(sys.executable).with_name("clawgym")
CLIENTS = ("litellm", "direct")


def one_eval(client: str, args: argparse.Namespace, store: Path) -> dict:
    """`clawgym eval` of the oracle through mini-swe-agent with `client`; its figures."""
    settings = {"mini-swe-agent": {"mode": args.mode, "max_turns": 2, "client": client}}
    argv = [str(CLAWGYM), "eval", "--model", "tiny-qwen3", "-H", "mini-swe-agent", "--tasks", str(args.tasks),
            "--set", "proxy.teacher.kind=oracle", "--set", f"orchestrator.harness_settings={json.dumps(settings)}",
            "--set", f"orchestrator.harness_concurrency={json.dumps({'mini-swe-agent': args.concurrency})}",
            "--store", f"sqlite:///{store}", "--json"]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"clawgym eval ({client}) failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    m = out["harnesses"]["mini-swe-agent"]
    harness_s = _harness_seconds(store, out["run_id"])
    return {"seconds": out["seconds"], "rollouts": m["samples"], "pass1": m["pass@1"],
            "harness_s_median": statistics.median(harness_s)}  # fmt: skip


def _harness_seconds(store: Path, run_id: str) -> list[float]:
    from clawgym.store.sql import SqlStore

    s = SqlStore(f"sqlite:///{store}")
    try:
        return [float(r.timings.get("harness_s", 0.0)) for r in s.list_rollouts(run_id)]
    finally:
        s.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=16, help="held-out mini tasks per evaluation")
    p.add_argument("--rounds", type=int, default=2, help="evaluations per client, alternating order")
    p.add_argument("--mode", choices=("text", "tools"), default="text")
    p.add_argument("--concurrency", type=int, default=8, help="mini-swe-agent runs at once")
    args = p.parse_args()
    runs: dict[str, list[dict]] = {c: [] for c in CLIENTS}
    with tempfile.TemporaryDirectory(prefix="clawgym-mswea-client-") as tmp:
        for r in range(args.rounds):
            for client in CLIENTS if r % 2 == 0 else CLIENTS[::-1]:
                figures = one_eval(client, args, Path(tmp) / f"{client}-{r}.db")
                runs[client].append(figures)
                print(f"round {r + 1} {client:8} {figures['seconds'] / figures['rollouts']:.2f} s a rollout, "
                      f"harness_s median {figures['harness_s_median']:.2f}, Pass@1 {figures['pass1']:.2f}", flush=True)  # fmt: skip
    summary = {}
    for client, rs in runs.items():
        n = sum(x["rollouts"] for x in rs)
        summary[client] = {
            "s_per_rollout": round(sum(x["seconds"] for x in rs) / n, 3),
            "harness_s_median": round(statistics.median(x["harness_s_median"] for x in rs), 3),
            "pass1": min(x["pass1"] for x in rs),
        }
    print(json.dumps({
        "mode": args.mode, "tasks": args.tasks, "rounds": args.rounds, "concurrency": args.concurrency, **summary,
        "speedup": round(summary["litellm"]["s_per_rollout"] / summary["direct"]["s_per_rollout"], 2),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
