"""Trainer step time on tiny-qwen3, sync vs async, with the time split by phase.

    .venv/bin/python bench/trainer.py [--steps 4] [--group-size 4] [--groups 4] [--new-tokens 16]

Each mode runs a fresh trainer (SQLite store, in-process bus, the toy rollout source generating
with an in-process torch engine that the trainer hot-reloads) for `--steps` steps after one warm-up
step. Per step: wall time (rollouts + update + checkpoint + commit, as the loop runs it), the update
alone, the wait for rollouts, and trained tree tokens per second of update. The ratio async/sync
is the share of wall time left when the next batch rolls out while training. The last line is one
JSON object of the figures.
"""

import argparse
import json
import logging
import tempfile
import time

import numpy as np

from clawgym.assemble import open_sql_store
from clawgym.inference.torch_engine import TorchEngine
from clawgym.policies import load_model, load_tokenizer
from clawgym.store.config import StoreConfig
from clawgym.trainer.config import TrainerConfig
from clawgym.trainer.loop import Trainer
from clawgym.trainer.loop_thread import LoopThread
from clawgym.trainer.toy import ToyRolloutSource


def run_mode(mode: str, args: argparse.Namespace) -> dict[str, float]:
    tmp = tempfile.mkdtemp(prefix=f"bench-trainer-{mode}-")
    store = open_sql_store(StoreConfig(url=f"sqlite:///{tmp}/store.db"))  # bus: memory://
    tokenizer = load_tokenizer("tiny-qwen3")
    runner = LoopThread()
    engine = TorchEngine(load_model("tiny-qwen3"), name="tiny-qwen3")
    cfg = TrainerConfig(
        model="tiny-qwen3",
        run_name=mode,
        mode=mode,
        steps=args.steps + 1,
        group_size=args.group_size,
        groups_per_step=args.groups,
        max_policy_lag=1,
        checkpoint_uri=f"{tmp}/checkpoints",
        keep_checkpoints=2,
    )
    source = ToyRolloutSource(store, engine, tokenizer, runner, max_new_tokens=args.new_tokens)
    trainer = Trainer(
        cfg, store=store, bus=store.bus, source=source, tokenizer=tokenizer, engines=[engine], runner=runner
    )
    try:
        trainer.run(steps=1)  # warm-up: first rollouts, first checkpoint
        started = time.perf_counter()
        trainer.run()
        wall = (time.perf_counter() - started) / args.steps
        records = [c.metrics for c in store.list_checkpoints(trainer.run_id)][1:]
    finally:
        runner.run(engine.aclose())
        trainer.close()
        runner.close()
        store.close()
    return {
        "step_wall_s": wall,
        "update_s": float(np.mean([r["update_s"] for r in records])),
        "rollout_wait_s": float(np.mean([r["rollout_wait_s"] for r in records])),
        "tokens_per_s": float(np.mean([r["tokens_per_s"] for r in records])),
        "tree_tokens": float(np.mean([r["tokens"] for r in records])),
        "sharing_ratio": float(np.mean([r["sharing_ratio"] for r in records])),
        "logprob_mismatch": float(np.mean([r["logprob_mismatch"] for r in records])),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--groups", type=int, default=4)
    p.add_argument("--new-tokens", type=int, default=16)
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    sync = run_mode("sync", args)
    async_ = run_mode("async", args)
    for name, r in (("sync", sync), ("async", async_)):
        print(
            f"{name:5}: {r['step_wall_s']:.2f} s/step wall, update {r['update_s']:.3f} s, "
            f"rollout wait {r['rollout_wait_s']:.2f} s, {r['tokens_per_s']:.0f} tree tok/s, "
            f"{r['tree_tokens']:.0f} tree tokens/step, sharing {r['sharing_ratio']:.2f}, "
            f"mismatch {r['logprob_mismatch']:.2e}"
        )
    print(f"async / sync wall time per step: {async_['step_wall_s'] / sync['step_wall_s']:.2f}")
    figures = {
        "sync_step_wall_s": round(sync["step_wall_s"], 3),
        "async_step_wall_s": round(async_["step_wall_s"], 3),
        "async_vs_sync_wall": round(async_["step_wall_s"] / sync["step_wall_s"], 3),
        "sync_update_s": round(sync["update_s"], 4),
        "sync_rollout_wait_s": round(sync["rollout_wait_s"], 3),
        "async_rollout_wait_s": round(async_["rollout_wait_s"], 3),
        "update_tree_tokens_per_s": round(sync["tokens_per_s"], 1),
        "tree_tokens_per_step": round(sync["tree_tokens"], 1),
        "sharing_ratio": round(sync["sharing_ratio"], 3),
        "logprob_mismatch": sync["logprob_mismatch"],
        "steps": args.steps,
        "group_size": args.group_size,
        "groups_per_step": args.groups,
        "new_tokens_per_call": args.new_tokens,
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
