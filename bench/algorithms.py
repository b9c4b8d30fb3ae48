"""GRPO and PPO side by side on the same budget: held-out Pass@1 before/after for each (issue #17, part 6).

Two `clawgym train` runs from the quickstart's config (SmolLM2-135M through the reference harness on
the mini suite, levels 1-2; same steps, batch, learning rate, seed, held-out tasks), differing only in
`trainer.algorithm.name`: GRPO (group-normalised rewards) and PPO (a value head on the policy's hidden
states, GAE along each path of the prefix tree, clipped value loss). Each run evaluates its initial
and final policy on held-out instances of the trained families and on unseen families; the table
shows Pass@1 before/after with 95% intervals and the paired difference, the mean training reward
of the last quarter of the steps, PPO's value loss and explained variance, and wall time.

PPO's value head starts untrained: its learning rate (`--ppo-value-lr`, `algorithm.value_lr`) is
set apart from the policy's so that the baseline is learned within the run's few steps;
`--ppo-value-epochs`, `--ppo-value-warmup` and `--ppo-lam` set `value_epochs`, `value_warmup_steps`
and `lam`. PPO's explained variance (of the values GAE used, over the whole batch) is printed per
step; the JSON holds it per step and `ppo_explained_variance_last_quarter`, its mean over the last
quarter of the steps (steps whose returns were all equal have none).

    .venv/bin/python bench/algorithms.py            # 24 steps of 4 groups x 8 each (the quickstart's batch)
    .venv/bin/python bench/algorithms.py --toy      # tiny-qwen3, 2 steps each: the plumbing (~2 min)
    .venv/bin/python bench/algorithms.py --only ppo --no-eval   # PPO's training figures alone

Measured on 2 cores with `--steps 12` (seeds 0 and 1): GRPO 11-13 minutes, PPO 15; the figures
are in the README. The LAST line is one JSON object of the figures.

The critic (issue #37, item 8), measured with `--only ppo --no-eval --steps 24` (seed 0, value_lr
1e-3, 2 shared cores with other work beside, ~33 minutes a run), explained variance per step:
- value_epochs 0, no warm-up (the defaults): +.00 - - -.10 -.03 -.03 +.02 +.08 -.42 +.32 +.16 -.86
  -.01 +.09 - - +.08 - -.13 +.33 +.30 +.26 -.06 +.10; last quarter +0.132, steps 13-24 +0.106,
  training reward of the last quarter 0.182.
- value_epochs 8, value_warmup_steps 2: +.00 -.22 - -.05 -.07 - - +.05 - +.15 -.24 -.55 -.02 -.03 -
  -.11 +.15 - +.07 +.20 +.22 +.23 - +.21; last quarter +0.185, steps 13-24 +0.102, reward 0.198.
- value_epochs 8, value_warmup_steps 2, value_lr 1e-4: +.00 -.04 - -.03 +.01 +.23 -.18 +.14 - +.24
  +.05 -.14 -.21 +.17 - -.09 +.16 - +.05 +.24 +.22 +.23 -.06 +.16; last quarter +0.142, steps 13-24
  +0.088, reward 0.188 (16 minutes: the machine was quieter).
Batch-wide, the critic explains a part of the returns' variance once the batches carry reward
(+0.2 to +0.3 from step 20): it learns which tasks pass. What the figure measured before this
(-0.06 to +0.03) was a mean of per-micro-batch figures, i.e. within one group's tree, which a V
nearly constant over a shared prompt cannot explain. Steps with 1-2 passing rollouts of 32 go
negative (-0.86 at one): Var(R) is tiny and V's per-task guesses from earlier batches miss. More
value steps per batch, a warm-up, or a smaller value lr gave no clear gain (one seed each; the
defaults stay 0).
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

from clawgym_app.commands.quickstart import FULL_LR, QuickstartOptions

ALGORITHMS = ("grpo", "ppo")
KEYS = ("pass1_before", "ci95_before", "pass1_after", "ci95_after", "delta", "ci95_delta", "significant")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--toy", action="store_true", help="tiny-qwen3, 2 steps per algorithm: checks the plumbing"
    )
    p.add_argument("--steps", type=int, default=STEPS, help="steps of each run")
    p.add_argument("--eval-tasks", type=int, default=QuickstartOptions.eval_tasks)
    p.add_argument("--eval-unseen-tasks", type=int, default=QuickstartOptions.eval_unseen_tasks)
    p.add_argument("--ppo-value-lr", type=float, default=1e-3, help="PPO: learning rate of the value head")
    p.add_argument(
        "--ppo-value-epochs", type=int, default=None, help="PPO: value_epochs (default: the config's)"
    )
    p.add_argument(
        "--ppo-value-warmup", type=int, default=None, help="PPO: value_warmup_steps (default: the config's)"
    )
    p.add_argument("--ppo-lam", type=float, default=None, help="PPO: GAE λ (default: the config's)")
    p.add_argument("--only", choices=ALGORITHMS, action="append", help="run only this algorithm (repeatable)")
    p.add_argument("--no-eval", action="store_true", help="no held-out evaluation: the training figures only")
    p.add_argument("--model", default="", help="policy (default smollm2-135m; tiny-qwen3 with --toy)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="", help="keep the run folders here (default: a temp folder)")
    args = p.parse_args()
    opts = replace(TOY, seed=args.seed) if args.toy else QuickstartOptions(
        steps=args.steps, eval_tasks=args.eval_tasks, eval_unseen_tasks=args.eval_unseen_tasks, seed=args.seed,
        finetune="full",  # every weight, as its algorithms were compared
    )  # fmt: skip
    if args.model:
        opts = replace(opts, model=args.model)
    out = Path(args.out or tempfile.mkdtemp(prefix="clawgym-algorithms-")).resolve()
    ppo = {"value_lr": args.ppo_value_lr, "value_epochs": args.ppo_value_epochs,
           "value_warmup_steps": args.ppo_value_warmup, "lam": args.ppo_lam}  # fmt: skip
    ppo = {k: v for k, v in ppo.items() if v is not None}
    evaluation = {"evaluation": {"at_start": False, "at_end": False}} if args.no_eval else {}
    runs: dict[str, dict] = {}
    for name in args.only or ALGORITHMS:
        algorithm = {"name": name} | (ppo if name == "ppo" else {})
        run_dir = out / name
        trainer = {"run_name": f"algorithms-{name}", "algorithm": algorithm}
        write_run_config(opts, run_dir, {"trainer": trainer} | evaluation)
        started = time.monotonic()
        summary = train(run_dir)
        steps = json.loads((run_dir / "report.json").read_text())["steps"]
        tail = steps[-max(1, len(steps) // 4) :]
        runs[name] = {
            **{f"{k}{s}": summary.get(f"{k}{s}") for s in SUFFIXES.values() for k in KEYS},
            "steps": len(steps),
            "reward_last_quarter": round(sum(s.get("reward", 0.0) for s in tail) / len(tail), 4)
            if tail
            else None,
            **{k: steps[-1].get(k) for k in ("value_loss", "explained_variance", "entropy") if steps},
            **(_critic(steps) if name == "ppo" else {}),
            "wall_s": round(time.monotonic() - started, 1),
            "report": str(run_dir / "report.md"),
        }

    print(
        f"{'algorithm':9} {'held-out part':16} {'Pass@1 before':>22} {'Pass@1 after':>22} {'difference':>24}"
    )
    for name, r in runs.items():
        r = {k: v for k, v in r.items() if v is not None}
        for suffix, what in zip(SUFFIXES.values(), ("trained families", "unseen families"), strict=True):
            low, high = r.get(f"ci95_delta{suffix}") or [math.nan, math.nan]
            delta = r.get(f"delta{suffix}")
            diff = f"{delta:+.3f} [{low:+.3f}, {high:+.3f}]" if delta is not None else "-"
            print(f"{name:9} {what:16} {interval(r, f'pass1_before{suffix}'):>22} "
                  f"{interval(r, f'pass1_after{suffix}'):>22} {diff:>24}")  # fmt: skip
    print(
        f"\n{'algorithm':9} {'steps':>5} {'reward (last 1/4)':>17} {'value loss':>10} {'expl. var':>9} {'wall s':>7}"
    )
    for name, r in runs.items():
        value_loss, ev = (
            math.nan if r.get(k) is None else r[k] for k in ("value_loss", "explained_variance")
        )
        print(f"{name:9} {r['steps']:5d} {r['reward_last_quarter'] or 0:17.3f} {value_loss:10.4f} "
              f"{ev:9.3f} {r['wall_s']:7.1f}")  # fmt: skip
    if "ppo" in runs:
        print("\nPPO's explained variance per step:", " ".join(
            "-" if ev is None else f"{ev:+.3f}" for ev in runs["ppo"]["explained_variance_per_step"]))  # fmt: skip
    top = (
        {"ppo_explained_variance_last_quarter": runs["ppo"]["explained_variance_last_quarter"]}
        if "ppo" in runs
        else {}
    )
    print(json.dumps({"model": opts.model, "steps": opts.steps, "batch": f"{opts.groups_per_step}x{opts.group_size}",
                      "lr": opts.lr or FULL_LR, "ppo_settings": {"value_lr": args.ppo_value_lr} | ppo, **top, **runs}))  # fmt: skip


def _critic(steps: list[dict]) -> dict:
    """PPO's explained variance per step (of the values GAE used; None where a step's returns were all
    equal) and its mean over the last quarter of the steps."""
    per_step = [s.get("explained_variance") for s in steps]
    tail = [ev for ev in per_step[-max(1, len(per_step) // 4) :] if ev is not None]
    return {
        "explained_variance_per_step": [None if ev is None else round(ev, 4) for ev in per_step],
        "explained_variance_last_quarter": round(sum(tail) / len(tail), 4) if tail else None,
        "value_warmup_steps": sum(bool(s.get("value_warmup")) for s in steps),
    }


if __name__ == "__main__":
    main()
