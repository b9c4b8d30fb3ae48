"""One SFT step over a long harness prompt at two micro-batch budgets (`trainer.micro_batch_tokens`).

    .venv/bin/python bench/sft_budget.py RUN_DIR [--budgets 8192 16384] [--rounds 2] [--threads 2]

RUN_DIR is a warm-started run folder of `bench/harness_transfer.py` (its config.yaml names the
demonstrations in `trainer.sft.source`). Each arm is the run's first SFT step as `Trainer._sft_step`
computes it: the step's demonstrations merged into one tree, packed at the arm's budget
(`trainer.sft.sft_packs`) and updated (`sft_update`) from the same initial weights, with the run's
trained layers, autocast and activation checkpointing. A tree larger than the budget is cut into
slices, each preceded by its first token's ancestors as context (`rl.packing`): where the shared
prompt nearly fills the budget (opencode's 7.7k tokens against 8,192), every slice computes that
prompt again. Arms alternate over `--rounds`, each keeping its fastest; the loss and gradient norm
of the arms must agree (the same step, laid out differently). `speedup` = the first budget's seconds
/ the last's. The LAST line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from clawgym.assemble import open_demonstrations
from clawgym.config import load_config
from clawgym.trainer.distributed import World
from clawgym.trainer.optim import make_optimizer
from clawgym.trainer.policy import build_policy
from clawgym.trainer.sft import sft_packs, sft_update
from clawgym.trainer.update import Normaliser


def step_at(cfg, trees, budget: int) -> dict:
    """The first SFT step's update over `trees` packed at `budget`: seconds, packs, tokens computed."""
    t = cfg.trainer
    policy = build_policy(t, cache_dir=cfg.inference.cache_dir).module
    optimizer, _ = make_optimizer(policy, t.algorithm, t.steps)
    packs = sft_packs(trees, t.algorithm, Normaliser.of(trees), budget)
    started, cpu = time.perf_counter(), time.process_time()
    diagnostics = sft_update(policy, optimizer, packs, t.algorithm, World())
    return {
        "seconds": time.perf_counter() - started, "cpu_s": time.process_time() - cpu,
        "packs": len(packs), "tokens_computed": sum(len(p.input_ids) for p in packs),
        "loss": diagnostics["loss"], "grad_norm": diagnostics["grad_norm"],
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", type=Path)
    p.add_argument("--budgets", type=int, nargs=2, default=[8192, 16384])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's own)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = load_config(str(args.run_dir / "config.yaml"))
    if not cfg.trainer.sft.source:
        p.error(f"{args.run_dir}: its trainer.sft.source names no demonstrations (a warm-started run folder)")
    demonstrations = open_demonstrations(cfg, None)
    per_rank, _, _ = demonstrations.step_trees(0, 1)
    trees = per_rank[0]
    best: dict[int, dict] = {}
    for r in range(args.rounds):
        for budget in args.budgets if r % 2 == 0 else args.budgets[::-1]:
            run = step_at(cfg, trees, budget)
            print(f"round {r + 1}, budget {budget}: {run['seconds']:.1f} s ({run['cpu_s']:.1f} s CPU), "
                  f"{run['packs']} packs of {run['tokens_computed']} tokens, loss {run['loss']:.5f}", flush=True)  # fmt: skip
            if budget not in best or run["seconds"] < best[budget]["seconds"]:
                best[budget] = run
    first, last = (best[b] for b in args.budgets)
    loss_diff = abs(first["loss"] - last["loss"]) / abs(last["loss"])
    norm_diff = abs(first["grad_norm"] - last["grad_norm"]) / last["grad_norm"]
    assert loss_diff < 1e-3 and norm_diff < 1e-2, f"the arms computed different steps: {first} vs {last}"
    print(json.dumps({
        "model": cfg.trainer.model, "tree_tokens": sum(t.flat.n_positions for t in trees),
        "demonstrations": sum(len(t.rewards) for t in trees), "threads": torch.get_num_threads(),
        "budgets": args.budgets, "arms": {str(b): best[b] for b in args.budgets},
        "speedup": first["seconds"] / last["seconds"], "loss_rel_diff": loss_diff, "grad_norm_rel_diff": norm_diff,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
