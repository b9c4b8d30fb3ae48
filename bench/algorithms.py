"""GRPO and PPO side by side on the same budget: held-out Pass@1 before/after for each (issue #17, part 6).

Two `clawgym train` runs from the quickstart's config (SmolLM2-135M through the reference harness on
the mini suite, levels 1-2; same steps, batch, learning rate, seed, held-out tasks), differing only in
`trainer.algorithm.name`: GRPO (group-normalised rewards) and PPO (a value head on the policy's hidden
states, GAE along each path of the prefix tree, clipped value loss). Each run evaluates its initial
and final policy on held-out instances of the trained families and on unseen families; the table
shows Pass@1 before/after with 95% intervals and the paired difference, the mean training reward
of the last quarter of the steps, PPO's value loss and explained variance, and wall time.

PPO's value head starts untrained: its learning rate (`--ppo-value-lr`, `algorithm.value_lr`) is
set apart from the policy's so that the baseline is learned within the run's few steps.

    .venv/bin/python bench/algorithms.py            # 24 steps of 4 groups x 8 each (the quickstart's batch)
    .venv/bin/python bench/algorithms.py --toy      # tiny-qwen3, 2 steps each: the plumbing (~2 min)

Measured on 2 cores with `--steps 12` (seeds 0 and 1): GRPO 11-13 minutes, PPO 15; the figures
are in the README. The LAST line is one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from training_runs import STEPS, SUFFIXES, TOY, interval, train, write_run_config

from clawgym_app.commands.quickstart import QuickstartOptions

ALGORITHMS = ("grpo", "ppo")
KEYS = ("pass1_before", "ci95_before", "pass1_after", "ci95_after", "delta", "ci95_delta", "significant")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--toy", action="store_true", help="tiny-qwen3, 2 steps per algorithm: checks the plumbing")
    p.add_argument("--steps", type=int, default=STEPS, help="steps of each run")
    p.add_argument("--eval-tasks", type=int, default=QuickstartOptions.eval_tasks)
    p.add_argument("--eval-unseen-tasks", type=int, default=QuickstartOptions.eval_unseen_tasks)
    p.add_argument("--ppo-value-lr", type=float, default=1e-3, help="PPO: learning rate of the value head")
    p.add_argument("--model", default="", help="policy (default smollm2-135m; tiny-qwen3 with --toy)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="", help="keep the run folders here (default: a temp folder)")
    args = p.parse_args()
    opts = replace(TOY, seed=args.seed) if args.toy else QuickstartOptions(
        steps=args.steps, eval_tasks=args.eval_tasks, eval_unseen_tasks=args.eval_unseen_tasks, seed=args.seed
    )  # fmt: skip
    if args.model:
        opts = replace(opts, model=args.model)
    out = Path(args.out or tempfile.mkdtemp(prefix="clawgym-algorithms-")).resolve()
    runs: dict[str, dict] = {}
    for name in ALGORITHMS:
        algorithm = {"name": name} | ({"value_lr": args.ppo_value_lr} if name == "ppo" else {})
        run_dir = out / name
        write_run_config(opts, run_dir, {"trainer": {"run_name": f"algorithms-{name}", "algorithm": algorithm}})
        started = time.monotonic()
        summary = train(run_dir)
        steps = json.loads((run_dir / "report.json").read_text())["steps"]
        tail = steps[-max(1, len(steps) // 4) :]
        runs[name] = {
            **{f"{k}{s}": summary.get(f"{k}{s}") for s in SUFFIXES.values() for k in KEYS},
            "steps": len(steps),
            "reward_last_quarter": round(sum(s.get("reward", 0.0) for s in tail) / len(tail), 4) if tail else None,
            **{k: steps[-1].get(k) for k in ("value_loss", "explained_variance", "entropy") if steps},
            "wall_s": round(time.monotonic() - started, 1),
            "report": str(run_dir / "report.md"),
        }

    print(f"{'algorithm':9} {'held-out part':16} {'Pass@1 before':>22} {'Pass@1 after':>22} {'difference':>24}")
    for name, r in runs.items():
        for suffix, what in zip(SUFFIXES.values(), ("trained families", "unseen families"), strict=True):
            low, high = r.get(f"ci95_delta{suffix}") or [math.nan, math.nan]
            delta = r.get(f"delta{suffix}")
            diff = f"{delta:+.3f} [{low:+.3f}, {high:+.3f}]" if delta is not None else "-"
            print(f"{name:9} {what:16} {interval(r, f'pass1_before{suffix}'):>22} "
                  f"{interval(r, f'pass1_after{suffix}'):>22} {diff:>24}")  # fmt: skip
    print(f"\n{'algorithm':9} {'steps':>5} {'reward (last 1/4)':>17} {'value loss':>10} {'expl. var':>9} {'wall s':>7}")
    for name, r in runs.items():
        print(f"{name:9} {r['steps']:5d} {r['reward_last_quarter'] or 0:17.3f} {r.get('value_loss') or math.nan:10.4f} "
              f"{r.get('explained_variance') or math.nan:9.3f} {r['wall_s']:7.1f}")  # fmt: skip
    print(json.dumps({"model": opts.model, "steps": opts.steps, "batch": f"{opts.groups_per_step}x{opts.group_size}",
                      "lr": opts.lr, "ppo_value_lr": args.ppo_value_lr, **runs}))  # fmt: skip


if __name__ == "__main__":
    main()
