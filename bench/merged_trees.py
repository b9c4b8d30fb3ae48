"""A step's groups trained as one tree against a tree per group, on the steps a run trained.

Reads a run folder's train steps (the groups each consumed, from its store) and replays each step's
update on the run's policy and trainer settings (`config.yaml`: model, algorithm, activation
checkpointing, micro-batch budget) twice, alternating: `per_group`, one tree per group as a trainer
with `trainer.merge_group_trees: false` trains them; `merged`, the rank's groups as one tree, the
prefix they share (the harness's system prompt) computed once. Both arms start every step from the
same weights and give the optimizer the same gradient (the largest relative difference is printed);
time is one forward + backward of the step's packs, without the optimizer's step.

    .venv/bin/python bench/merged_trees.py --run-dir runs/<name> [--steps 6] [--rounds 2]

A run to read: `clawgym quickstart --steps 8 --eval-tasks 8 --eval-unseen-tasks 8 --run-dir D`.
Steps with at least two groups that have reward variance are replayed (one such group has nothing to
merge). The LAST line is one JSON object: per arm the mean update seconds and tree tokens, and the
ratios `speedup` and `tokens_ratio` (per_group / merged).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from clawgym.config import load_config
from clawgym.report.run_folder import store_url
from clawgym.store.sql import SqlStore
from clawgym.trainer.batch import Batch, build_batch
from clawgym.trainer.distributed import World
from clawgym.trainer.optim import make_optimizer
from clawgym.trainer.policy import build_policy
from clawgym.trainer.update import Normaliser, prepare_packs, update

ARMS = {"per_group": False, "merged": True}


def trained_batches(run_dir: Path, cfg, limit: int) -> list[Batch]:
    """The first `limit` steps of the folder's run with two or more groups that have reward variance."""
    store = SqlStore(store_url(run_dir))
    try:
        steps = [step for run in store.list_runs() for step in store.list_train_steps(run.id)]
        batches = []
        for step in steps:
            groups = [store.get_group(g) for g in step.metrics.get("trained_groups", [])]
            # every group the step trained (a lag bound no group can pass: none is dropped here)
            batch = build_batch(groups, step.step - 1, max(cfg.max_policy_lag, step.step))
            if sum(len(set(t.rewards)) > 1 for t in batch.trees) >= 2:
                batches.append(batch)
            if len(batches) == limit:
                break
    finally:
        store.close()
    return batches


def one_update(module, optimizer, cfg, batch: Batch, merge: bool) -> tuple[float, int, list[torch.Tensor]]:
    """(seconds, packed tokens, gradients) of one forward + backward of `batch`; weights kept."""
    grads: list[torch.Tensor] = []
    optimizer.step = lambda: grads.extend(p.grad.clone() for p in module.parameters() if p.grad is not None)
    world = World()
    started = time.perf_counter()
    packs = prepare_packs(
        module, batch.trees, cfg.algorithm, Normaliser.of(batch.trees), cfg.micro_batch_tokens, world, merge
    )
    update(module, optimizer, packs, cfg.algorithm, world, batch.version)
    return time.perf_counter() - started, sum(len(p) for p in packs), grads


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run-dir", type=Path, required=True, help="a run folder (config.yaml, clawgym.db)")
    p.add_argument("--steps", type=int, default=6, help="steps to replay, at most")
    p.add_argument("--rounds", type=int, default=2, help="rounds over the steps, arms alternating")
    args = p.parse_args()
    cfg = load_config(args.run_dir / "config.yaml").trainer
    batches = trained_batches(args.run_dir, cfg, args.steps)
    if not batches:
        raise SystemExit(f"{args.run_dir}: no step trained two groups with reward variance")
    built = build_policy(cfg)
    optimizer, _ = make_optimizer(built.module, cfg.algorithm, cfg.steps)
    seconds = {arm: [] for arm in ARMS}
    tokens = {arm: 0 for arm in ARMS}
    worst = 0.0
    one_update(built.module, optimizer, cfg, batches[0], True)  # warm-up
    for r in range(args.rounds):
        for i, batch in enumerate(batches):
            arms = list(ARMS) if (r + i) % 2 == 0 else list(ARMS)[::-1]
            grads = {}
            for arm in arms:
                s, n, grads[arm] = one_update(built.module, optimizer, cfg, batch, ARMS[arm])
                seconds[arm].append(s)
                tokens[arm] += n if r == 0 else 0
            worst = max(
                worst,
                *(
                    float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))
                    for a, b in zip(grads["merged"], grads["per_group"], strict=True)
                ),
            )
            print(
                f"round {r + 1}, step {batch.version + 1} ({len(batch.trees)} groups): "
                + ", ".join(f"{a} {seconds[a][-1]:.2f} s" for a in ARMS),
                flush=True,
            )
    figures = {
        arm: {"update_s_mean": round(sum(s) / len(s), 3), "tokens": tokens[arm]} for arm, s in seconds.items()
    }
    out = {
        "steps": len(batches),
        "rounds": args.rounds,
        **figures,
        "speedup": round(figures["per_group"]["update_s_mean"] / figures["merged"]["update_s_mean"], 3),
        "tokens_ratio": round(tokens["per_group"] / max(tokens["merged"], 1), 3),
        "grad_rel_diff_max": worst,
        "activation_checkpointing": cfg.activation_checkpointing,
        "threads": torch.get_num_threads(),
    }
    print(f"{len(batches)} steps: merged {out['speedup']}x the speed, {out['tokens_ratio']}x fewer tokens")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
