"""Is GRPO stable for 200 steps on CPU? Reward, held-out Pass@1, KL to the initial policy, entropy and
clip fraction over a long run, and a collapse verdict (issue #17, part 7).

One `clawgym train` run (the quickstart's config: SmolLM2-135M through the reference harness on the
mini suite, levels 1-2) with smaller batches, evaluated every `--every` steps
(`evaluation.every_steps`) on held-out instances of the trained families and on unseen families, and
with `trainer.algorithm.kl_diagnostic` on: `kl_ref` is the k3 estimate of KL(π_θ ‖ π_0) to the
initial policy on each step's sampled tokens, exp(Δ) - Δ - 1 with Δ = logπ_0 - logπ_θ, token mean;
unbiased on the policy's own samples (the batch is sampled by π_θ itself in sync mode: policy lag 0),
never negative, measured by one no-grad forward of a frozen copy of π_0 per step and no part of the
loss (kl_coef stays 0). The run's report (report.md in the run folder) plots reward and pass rate
with the evaluations' Pass@1 and 95% intervals (reward_pass_rate.png), and KL, entropy and clip
fraction (kl_entropy.png).

Collapse, as this bench calls it (any of): a non-finite loss; the mean entropy of the last tenth of
the steps below a quarter of the first tenth's; the last held-out Pass@1 (trained families) below
the lower 95% bound of the first.

    .venv/bin/python bench/stability.py            # 200 steps of 4 groups x 4, eval every 25 (48 + 48 tasks)
    .venv/bin/python bench/stability.py --toy      # tiny-qwen3, 4 steps, eval every 2: the plumbing (~3 min)

Measured on 2 cores with `--groups-per-step 2 --group-size 4` (200 x 8 training rollouts, 9
evaluations of 96 tasks): 69 minutes, with other runs beside it, entropy collapsed (0.55 -> 0.06);
with `--kl-coef 0.1` as well, 93 minutes on an AVX2-only machine, no collapse (entropy 0.90 of its
start) and a slower rise (both with async steps: their KL on samples one version old). At 9cf00af
(sync, each token's k3 capped at kl_cap 10) with `--kl-coef 0.05`: 38.5 minutes on an AVX-512
machine, no collapse (entropy 0.50 of its start), trained families 0.104 -> 0.417. The figures of
all three are in the README.
The LAST line is one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from training_runs import SUFFIXES, TOY, held_out_parts, train, write_run_config

from clawgym.assemble import open_store
from clawgym.config import load_config
from clawgym.evaluation.passk import estimate
from clawgym.evaluation.runner import recorded_results
from clawgym.report.run_folder import CONFIG_FILE
from clawgym_app.commands.quickstart import QuickstartOptions

CURVE_KEYS = ("reward", "pass_rate", "kl_ref", "approx_kl", "entropy", "clipfrac", "grad_norm", "loss", "policy_lag")


def eval_curve(run_dir: Path, run_id: str) -> list[dict]:
    """Held-out Pass@1 with its 95% interval at every evaluated version, per held-out part."""
    cfg = load_config(run_dir / CONFIG_FILE)
    parts = held_out_parts(run_dir)
    store = open_store(cfg)
    try:
        results = recorded_results(store.list_evals(run_id))
    finally:
        store.close()
    points = []
    for result in sorted(results, key=lambda r: r.version):
        point: dict = {"version": result.version}
        for harness_eval in result.harnesses.values():
            for kind, suffix in SUFFIXES.items():
                ids = set(parts.ids(kind))
                counts = [t for t in harness_eval.counts if t.task_id in ids]
                if counts:
                    p = estimate(counts, 1)
                    point[f"pass1{suffix}"] = round(p.value, 4)
                    point[f"ci95{suffix}"] = [round(p.ci95[0], 4), round(p.ci95[1], 4)]
        points.append(point)
    return points


def _mean(steps: list[dict], key: str) -> float:
    values = [s[key] for s in steps if isinstance(s.get(key), int | float)]
    return sum(values) / len(values) if values else math.nan


def verdict(steps: list[dict], evals: list[dict]) -> dict:
    """The collapse checks of the module docstring, each with its figures."""
    tenth = max(1, len(steps) // 10)
    h0, h1 = _mean(steps[:tenth], "entropy"), _mean(steps[-tenth:], "entropy")
    finite = all(math.isfinite(s.get("loss", 0.0)) for s in steps)
    first, last = (evals[0], evals[-1]) if evals else ({}, {})
    fell = bool(evals) and last.get("pass1", 0.0) < first.get("ci95", [0.0, 0.0])[0]
    entropy_ratio = h1 / h0 if h0 and math.isfinite(h0) and math.isfinite(h1) else math.nan
    return {
        "finite_loss": finite,
        "entropy_first_tenth": round(h0, 4),
        "entropy_last_tenth": round(h1, 4),
        "entropy_ratio": round(entropy_ratio, 4),
        "pass1_fell_below_initial_interval": fell,
        "collapse": (not finite) or entropy_ratio < 0.25 or fell,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--toy", action="store_true", help="tiny-qwen3, 4 steps, eval every 2: checks the plumbing")
    p.add_argument("--steps", type=int, default=200, help="GRPO steps")
    p.add_argument("--every", type=int, default=25, help="held-out evaluation every N steps (evaluation.every_steps)")
    p.add_argument("--group-size", type=int, default=4, help="G: samples per task group")
    p.add_argument("--groups-per-step", type=int, default=4, help="task groups per step")
    p.add_argument("--eval-tasks", type=int, default=48, help="held-out instances of trained families")
    p.add_argument("--eval-unseen-tasks", type=int, default=48, help="held-out tasks of unseen families")
    p.add_argument("--model", default="", help="policy (default smollm2-135m; tiny-qwen3 with --toy)")
    p.add_argument("--kl-coef", type=float, default=0.0, help="β of the k3 KL to the initial policy in the loss")
    p.add_argument("--entropy-coef", type=float, default=0.0, help="weight of the entropy bonus in the loss")
    p.add_argument("--staleness", type=int, default=0, help="async, trainer.max_policy_lag N (0: sync)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--run-dir", default="", help="keep the run folder here (default: a temp folder)")
    args = p.parse_args()
    if args.toy:
        opts = replace(TOY, steps=4, seed=args.seed)
        every = 2
    else:
        opts = QuickstartOptions(
            steps=args.steps, group_size=args.group_size, groups_per_step=args.groups_per_step,
            eval_tasks=args.eval_tasks, eval_unseen_tasks=args.eval_unseen_tasks, seed=args.seed,
            finetune="full",  # kl_ref's frozen initial policy is not kept with LoRA
        )  # fmt: skip
        every = args.every
    if args.model:
        opts = replace(opts, model=args.model)
    # sync by default, not the quickstart's async: kl_ref is unbiased only on samples of the policy it
    # measures; --staleness N trains async with rollouts spanning up to N versions (kl_ref then biased)
    opts = replace(opts, mode="async" if args.staleness else "sync")
    run_dir = Path(args.run_dir or tempfile.mkdtemp(prefix="clawgym-stability-")).resolve()
    trainer: dict = {"run_name": "stability", "algorithm": {
        "kl_diagnostic": True, "kl_coef": args.kl_coef, "entropy_coef": args.entropy_coef,
    }}  # fmt: skip
    if args.staleness:
        trainer["max_policy_lag"] = args.staleness
    write_run_config(opts, run_dir, {"trainer": trainer, "evaluation": {"every_steps": every}})
    started = time.monotonic()
    summary = train(run_dir)
    wall = time.monotonic() - started
    report = json.loads((run_dir / "report.json").read_text())
    steps = report["steps"]
    evals = eval_curve(run_dir, report["run_id"])

    stride = max(1, len(steps) // 20)
    print(f"{'step':>5} {'reward':>7} {'pass':>5} {'kl_ref':>8} {'approx_kl':>9} {'entropy':>8} {'clipfrac':>8}")
    for s in steps:
        if s["step"] % stride == 0 or s is steps[-1]:
            print(f"{s['step']:5d} {s.get('reward', math.nan):7.3f} {s.get('pass_rate', math.nan):5.2f} "
                  f"{s.get('kl_ref', math.nan):8.5f} {s.get('approx_kl', math.nan):9.5f} "
                  f"{s.get('entropy', math.nan):8.4f} {s.get('clipfrac', math.nan):8.4f}")  # fmt: skip
    print(f"\n{'version':>7}  {'Pass@1 trained families':>26}  {'Pass@1 unseen families':>26}")
    for e in evals:
        cells = []
        for suffix in SUFFIXES.values():
            low, high = e.get(f"ci95{suffix}", [math.nan, math.nan])
            cells.append(f"{e.get(f'pass1{suffix}', math.nan):.3f} [{low:.3f}, {high:.3f}]")
        print(f"{e['version']:7d}  {cells[0]:>26}  {cells[1]:>26}")
    checks = verdict(steps, evals)
    print(f"\ncollapse: {checks['collapse']}  (entropy last/first tenth {checks['entropy_ratio']}, "
          f"finite loss {checks['finite_loss']}, Pass@1 fell below the initial interval "
          f"{checks['pass1_fell_below_initial_interval']})")  # fmt: skip
    windows = [steps[i : i + every] for i in range(0, len(steps), every)]
    figures = {
        "model": opts.model,
        "steps": len(steps),
        "every": every,
        "batch": f"{opts.groups_per_step}x{opts.group_size}",
        "kl_coef": args.kl_coef,
        "entropy_coef": args.entropy_coef,
        "staleness": args.staleness,
        "dropped_groups": sum(s.get("groups_dropped", 0) for s in steps),
        **checks,
        "evals": evals,
        # each window of `every` steps: the mean of each curve
        "curve": [
            {"steps": [w[0]["step"], w[-1]["step"]], **{k: round(_mean(w, k), 5) for k in CURVE_KEYS}}
            for w in windows
        ],
        **{f"{k}{suffix}": summary.get(f"{k}{suffix}")
           for suffix in SUFFIXES.values() for k in ("pass1_before", "pass1_after", "delta", "ci95_delta")},
        "wall_s": round(wall, 1),
        "report": str(run_dir / "report.md"),
        "plots": [str(run_dir / n) for n in ("reward_pass_rate.png", "kl_entropy.png")],
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
