"""One training step under torchrun (a helper process of test_distributed.py, not a test module).

    torchrun --standalone --nproc-per-node N tests/trainer/fsdp_step.py OUT_DIR [SETTINGS_JSON]

Every rank builds tiny-qwen3; with N > 1 it is sharded with FSDP2 (gloo on CPU). Rank 0 builds the
batch (seeded synthetic traces with branches, 3 groups: uneven over 2 ranks) and scatters trees as
the trainer does; each algorithm (GRPO, PPO) takes one step on a fresh policy and saves its
checkpoint (a collective gather, rank 0 writes) and diagnostics under OUT_DIR/<algorithm>.
SETTINGS_JSON: trainer config fields on top (`fsdp`, `activation_checkpointing`; `algorithm` fields
merge into each algorithm's); `"fill": true` gives the update its first group only and the others
in two later rounds (`update.Fill`), scattered by rank 0 as the trainer's `_Fill` does.
"""

import json
import os
import sys
from pathlib import Path

from clawgym.trainer import checkpoint as ckpt
from clawgym.trainer.batch import assign_to_ranks, build_batch
from clawgym.trainer.config import TrainerConfig
from clawgym.trainer.distributed import init_world, shard
from clawgym.trainer.optim import make_optimizer
from clawgym.trainer.policy import build_policy
from clawgym.trainer.update import Normaliser, prepare_packs, update
from clawgym.trajectory.synthetic import TraceShape, synthetic_groups

SHAPE = TraceShape(
    n_groups=3, group_size=3, calls=(2, 4), system_tokens=24, task_tokens=8, observation_tokens=6,
    output_tokens=6, vocab_size=4000, p_compaction=0.2, p_subagent=0.2, subagent_system_tokens=10,
)  # fmt: skip


class ScatteredRounds:
    """`update.Fill` over fixed later rounds of trees: rank 0 scatters each round's trees, then the
    rescale of the first round's normaliser to the whole batch's."""

    def __init__(self, module, cfg, world, norm, rounds, whole) -> None:
        self.module, self.cfg, self.world, self.norm = module, cfg, world, norm
        self.rounds, self.whole = rounds, whole  # rank 0 only: the later rounds, the batch's normaliser
        self._rescale = 1.0

    def next_packs(self):
        shards = None
        if self.world.is_main:
            if self.rounds:
                shards = [("trees", t) for t in assign_to_ranks(self.rounds.pop(0), self.world.size)]
            else:
                shards = [("done", self.norm.ratio(self.whole, self.cfg.algorithm.aggregation))] * self.world.size
        kind, payload = self.world.scatter(shards)
        if kind == "done":
            self._rescale = payload
            return None
        return prepare_packs(self.module, payload, self.cfg.algorithm, self.norm, 96, self.world)

    def rescale(self) -> float:
        return self._rescale


def main(out: Path, settings: dict) -> None:
    world = init_world(timeout_s=600)
    extra = settings.pop("algorithm", {})
    in_rounds = settings.pop("fill", False)
    for algorithm in ("grpo", "ppo"):
        cfg = TrainerConfig(
            model="tiny-qwen3", algorithm={"name": algorithm, "lr": 1e-3, "epochs": 2} | extra, **settings
        )
        built = build_policy(cfg)
        if world.size > 1:
            shard(built.module, built.module.decoder_layers(), world, cfg.fsdp)
        optimizer, scheduler = make_optimizer(built.module, cfg.algorithm, cfg.steps)
        shards, rounds, whole = None, None, None
        if world.is_main:
            batch = build_batch(synthetic_groups(SHAPE, seed=5), version=0, max_policy_lag=1)
            first = batch.trees[:1] if in_rounds else batch.trees
            rounds, whole = [batch.trees[1:2], batch.trees[2:]], Normaliser.of(batch.trees)
            norm = Normaliser.of(first)
            shards = [(trees, norm) for trees in assign_to_ranks(first, world.size)]
        trees, norm = world.scatter(shards)
        packs = prepare_packs(built.module, trees, cfg.algorithm, norm, 96, world)
        fill = ScatteredRounds(built.module, cfg, world, norm, rounds, whole) if in_rounds else None
        diagnostics = update(built.module, optimizer, packs, cfg.algorithm, world, 0, fill=fill)
        scheduler.step()
        ckpt.save_checkpoint(built, optimizer, scheduler, None, str(out / algorithm), {"version": 1}, world)
        if world.is_main:
            record = {"diagnostics": diagnostics, "packs_rank0": len(packs), "world": world.size}
            (out / algorithm / "diagnostics.json").write_text(json.dumps(record))
    world.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]), json.loads(sys.argv[2]) if len(sys.argv) > 2 else {})
    # Everything is written and the process group is gone: skip interpreter teardown, where gloo's
    # worker threads can still abort the process (pytorch/pytorch#179291; seen once in CI).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
