"""The RL loop: rollouts → groups → trees → update → checkpoint → publish, step after step.

Owns the order of a step and its commit (ARCHITECTURE.md §1, §6). Reading `Trainer.step` top to
bottom is reading what happens:

1. collect   (rank 0) top up rollout requests (async: up to `max_policy_lag` steps ahead, so they
             roll out while this one trains), wait until `groups_per_step` groups are owed and no
             group at its last step within the staleness bound is still rolling out, take them,
             oldest first
2. batch     (rank 0) trees per group; groups older than `max_policy_lag` versions are dropped
3. update    (all ranks) advantages, packed micro-batches, gradient accumulation, AdamW, clipping;
             with `max_groups_per_step`, a step that would wait in 1 for a group at its last step
             trains instead: it takes the groups it has, and adds complete ones to its gradient
             (`_Fill`) until that group is in, then steps
4. save      (all ranks gather, rank 0 writes) the HF folder + optimizer/scheduler/RNG state
5. commit    (rank 0) register the checkpoint in the store together with the groups it consumed:
             the step happened iff this registration did; then ack the bus, record the step's
             metrics, prune old folders, and tell the engines to hot-reload the new version

Killed anywhere before 5, a restarted trainer redoes the step from the last registered checkpoint
(its groups are still owed); killed after 5, it continues after it (those groups are consumed).

Rollouts span versions (AReaL's bounded staleness, arXiv:2505.24298): in async mode the groups
started and not yet trained are kept at (`max_policy_lag` + 1) × `groups_per_step`, a rollout
keeps running across publishes (each call records the version that served it), and a step takes
the first complete groups whatever versions served them. Staleness counts from a group's oldest
generated token, never from the version it was requested under: no trained token is more than
`max_policy_lag` versions older than the weights it updates. A group whose oldest token is of
version c can be trained until the trainer's version is c + `max_policy_lag`; the step at that
version waits for it if it is still rolling out (the store's `open_group_versions`), and a group
whose first call comes late costs no wait before it. With `stale_calls: mask` no step waits for such
a group: it is trained when complete, its tokens past the bound left out of the loss. Sync mode is
the same loop with nothing requested ahead.
"""

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from clawgym.errors import ClawgymError, FailedPrecondition, Unavailable
from clawgym.inference.interface import Engine
from clawgym.records import Checkpoint, Group
from clawgym.rl.packing import PackedSequence
from clawgym.store.bus import EventBus
from clawgym.store.interface import TrajectoryStore
from clawgym.trainer import checkpoint as ckpt
from clawgym.trainer.batch import Batch, assign_to_ranks, build_batch, oldest_version
from clawgym.trainer.config import TrainerConfig, check_trainer_config
from clawgym.trainer.curriculum import TaskSampler
from clawgym.trainer.demonstrations import Demonstrations
from clawgym.trainer.distributed import World, shard
from clawgym.trainer.feed import GroupFeed
from clawgym.trainer.loop_thread import LoopThread
from clawgym.trainer.memory import return_free_memory, unpool_large_blocks
from clawgym.trainer.metrics import TrainerMetrics
from clawgym.trainer.optim import make_optimizer
from clawgym.trainer.policy import BuiltPolicy, build_policy
from clawgym.trainer.sft import sft_packs, sft_update
from clawgym.trainer.source import RolloutSource, make_sampler, plan_batch
from clawgym.trainer.update import Normaliser, prepare_packs, update

log = logging.getLogger(__name__)

# Mean |Δ logprob| between engine and trainer above which a step with no policy lag is suspicious
# (numerics alone give ~1e-5 in fp32 and ~1e-2 in bf16; scoring T = 0.7 samples at T = 1 gave ~0.1).
MISMATCH_WARNING = 0.05

RELOAD_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class TrainerStatus:
    """What Trainer.Status reports: replaced whole (never mutated), so any thread may read it."""

    run_id: str = ""
    step: int = 0
    policy_version: int = 0
    state: str = "starting"  # starting | waiting_rollouts | training | publishing | finished | failed
    metrics: dict[str, Any] = field(default_factory=dict)


class Trainer:
    """One RL run. Rank 0 holds the store, bus, rollout source and engines; other ranks pass None."""

    def __init__(
        self,
        cfg: TrainerConfig,
        *,
        store: TrajectoryStore | None,
        bus: EventBus | None,
        source: RolloutSource | None,
        tokenizer: Any,
        engines: list[Engine] | None = None,
        runner: LoopThread | None = None,
        world: World | None = None,
        metrics: TrainerMetrics | None = None,
        close_runner: bool = False,
        cache_dir: str | None = None,
        demonstrations: Demonstrations | None = None,
        sft_threads: int = 0,
    ) -> None:
        check_trainer_config(cfg)
        self.cfg = cfg
        self.cache_dir = cache_dir  # where a built-in policy is built (`inference.cache_dir`)
        self.demonstrations = demonstrations  # rank 0: the batches of SFT steps (`cfg.is_sft_step`)
        # torch threads of an SFT step (0: as set): no rollout runs then, so an in-process engine's
        # share of the cores is the trainer's
        self.sft_threads = sft_threads
        self.store, self.bus, self.source = store, bus, source
        self.tokenizer = tokenizer
        self.engines = list(engines or [])
        self.world = world or World()
        self.metrics = metrics or TrainerMetrics()
        self._close_runner = close_runner or (runner is None and bool(self.engines))
        self.runner = runner or (LoopThread() if self.engines else None)
        self.status = TrainerStatus()
        self.run_id = ""
        self.version = 0
        self.rng = np.random.default_rng(cfg.seed)
        self.policy: BuiltPolicy | None = None
        self.feed: GroupFeed | None = None
        # groups of steps that trained nothing (all dropped or empty): committed with the next checkpoint
        self._untrained = Batch(version=0)
        self._owed: dict[str, Group] = {}  # the feed's owed groups, read once each (rank 0)
        self._owed_oldest: dict[str, int] = {}  # their oldest generating version
        self.dropped_groups = 0  # groups past max_policy_lag, consumed without training, this process
        self.sampler: TaskSampler | None = None  # rank 0
        self._requested_groups = 0  # by this trainer, for `_owed_or_outstanding`
        self._warned_mismatch = False
        # (version, the weights as served): made once per version, for its checkpoint and its engines
        self._served: tuple[int, dict[str, torch.Tensor]] | None = None
        self._arrived_before = 0  # groups owed when the feed started (a predecessor's)
        self._wait: dict[str, float] = {}  # the last collect's waiting figures, for its step record
        self._filling = False  # the last collect left a group at its last step rolling out (_Fill)
        self._download_cache = Path(f"/tmp/clawgym-trainer-{cfg.run_name}")

    # --- start: the run, the latest checkpoint, the feed ---

    def start(self) -> None:
        """Finds the run and its latest registered checkpoint, builds the policy from it (or from
        `cfg.model`), restores optimizer/scheduler/RNG, and joins the group feed."""
        latest = None
        if self.world.is_main:
            assert self.store is not None and self.bus is not None and self.source is not None
            self.run_id = ckpt.resolve_run(self.store, self.cfg)
            checkpoints = self.store.list_checkpoints(self.run_id)
            latest = checkpoints[-1] if checkpoints else None
            self.store.set_run_status(self.run_id, "running")
        self.run_id, latest = self.world.broadcast((self.run_id, latest))
        unpool_large_blocks(self.cfg.heap_mmap_threshold_mb)  # before the policy's tensors exist
        state: dict[str, Any] = {}
        folder = None
        try:
            if latest is not None:
                folder = ckpt.local_folder(latest.uri, self._download_cache)
                state = ckpt.load_trainer_state(folder)
                self.version = latest.version
            weights = str(folder) if folder is not None and not self.cfg.lora.enabled else None
            self.policy = build_policy(
                self.cfg,
                weights=weights,
                value_head_state=state.get("value_head"),
                device=self.world.device,
                cache_dir=self.cache_dir,
            )
            if state.get("adapters"):
                self.policy.module.lm.load_state_dict(state["adapters"], strict=False)
        except Exception as e:
            if latest is None:
                raise
            # a corrupt or partial checkpoint ends the run naming it (never a half-random policy)
            raise FailedPrecondition(
                f"the trainer cannot load checkpoint {latest.version} from {latest.uri}: {e}"
            ) from e
        self.policy.module.to(self.world.device)
        if self.policy.reference is not None:
            self.policy.reference.to(self.world.device)
        if self.world.size > 1:
            shard(self.policy.module, self.policy.module.decoder_layers(), self.world, self.cfg.fsdp)
            if self.policy.reference is not None:
                shard(
                    self.policy.reference, self.policy.reference.decoder_layers(), self.world, self.cfg.fsdp
                )
        self.optimizer, self.scheduler = make_optimizer(
            self.policy.module, self.cfg.algorithm, self.cfg.steps
        )
        if state:
            if not ckpt.restore_optimizer(self.policy, self.optimizer, state):
                log.warning("checkpoint %d holds no optimizer state: its moments start afresh", self.version)
            self.scheduler.load_state_dict(state["scheduler"])
            torch.set_rng_state(state["torch_rng"])
            if "plan_rng" in state:
                self.rng.bit_generator.state = state["plan_rng"]
        if self.world.is_main:
            self.sampler = make_sampler(self.cfg, list(self.cfg.tasks) or self.source.task_ids())
            self.sampler.load_state(state.get("sampler", {}))
            self.feed = GroupFeed(
                self.store, self.bus, self.run_id, sweep_interval_s=self.cfg.sweep_interval_s
            )
            self.feed.start()
            self._arrived_before = self.feed.arrived
            if latest is not None:
                self._reload_engines(latest.version, latest.uri)
            elif any(_in_process(e) for e in self.engines):
                self._reload_engines(self.version, "")  # the engines compute with these weights from now on
            if self._lending():
                self.optimizer.register_step_pre_hook(self._hold_borrowers)
        self._set_status("waiting_rollouts")
        log.info(
            "trainer: run %s at version %d (%s)", self.run_id, self.version, "resumed" if latest else "new"
        )

    # --- the loop ---

    def run(self, steps: int | None = None, stop: threading.Event | None = None) -> None:
        """Trains until version `cfg.steps` (or `steps` more steps, or `stop` is set)."""
        if self.policy is None:
            self.start()
        target = self.cfg.steps if steps is None else min(self.cfg.steps, self.version + steps)
        try:
            while self.version < target and not (stop is not None and stop.is_set()):
                self.step()
        except BaseException:
            self._set_status("failed")
            raise
        if self.version >= self.cfg.steps:
            self._set_status("finished")
            if self.world.is_main:
                self.store.set_run_status(self.run_id, "finished")

    def step(self) -> bool:
        """One step (see the module doc); False when every group it took was dropped (nothing trained)."""
        if self.cfg.is_sft_step(self.version):
            return self._sft_step()
        # 1-2. collect, batch (rank 0), then hand each rank its trees
        shards = None
        if self.world.is_main:
            groups, wait_s = self._collect()
            batch = self._batch_of(groups)
            if not batch.trees:
                self._untrained.dropped += batch.dropped
                self._untrained.empty += batch.empty
                log.warning("step %d: all %d groups dropped or empty", self.version + 1, len(groups))
            trees = assign_to_ranks(batch.trees, self.world.size)
            norm = Normaliser.of(batch.trees)
            shards = [(trees[r], norm) for r in range(self.world.size)]
        my_trees, norm = self.world.scatter(shards)
        if norm.generated == 0:
            return False
        # 3. update
        self._set_status("training")
        started = time.perf_counter()
        policy = self.policy.module
        lr = self.scheduler.get_last_lr()[0]
        packs = prepare_packs(
            policy, my_trees, self.cfg.algorithm, norm, self.cfg.micro_batch_tokens, self.world,
            merge=self.cfg.merge_group_trees,
        )  # fmt: skip
        value_only = self._value_warmup()
        fill = (
            _Fill(self, batch if self.world.is_main else None, norm)
            if self._fills() and not value_only
            else None
        )
        diagnostics = update(
            policy, self.optimizer, packs, self.cfg.algorithm, self.world, self.version, self.policy.reference,
            value_only=value_only, fill=fill,
        )  # fmt: skip
        self.scheduler.step()
        fill_wait_s = fill.wait_s if fill is not None else 0.0
        update_s = time.perf_counter() - started - fill_wait_s
        # 4. save
        version, uri = self._save_next_version()
        # 5. commit (rank 0)
        if self.world.is_main:
            tokens = sum(t.flat.n_positions for t in batch.trees)
            record = {
                **diagnostics,
                "lr": lr,
                "version": version,
                "groups": len(batch.trees),
                # groups whose rewards differ: only these give GRPO a gradient (update.has_gradient)
                "groups_with_signal": sum(len(set(t.rewards)) > 1 for t in batch.trees),
                "trained_groups": [t.group_id for t in batch.trees],
                "groups_dropped": len(batch.dropped) + len(self._untrained.dropped),
                "rollouts": sum(len(t.rewards) for t in batch.trees),
                "reward": float(np.mean([r for t in batch.trees for r in t.rewards])),
                "pass_rate": float(np.mean([p for t in batch.trees for p in t.passed])),
                "policy_lag": float(np.mean([version - 1 - t.oldest_version for t in batch.trees])),
                "policy_lag_max": max(version - 1 - t.oldest_version for t in batch.trees),
                "sharing_ratio": batch.sharing_ratio(),
                "tokens": tokens,
                "tokens_per_s": tokens / max(update_s, 1e-9),
                "update_s": update_s,
                "rollout_wait_s": wait_s + fill_wait_s,
                **self._wait,
                "rollout_wait_bound_s": self._wait.get("rollout_wait_bound_s", 0.0) + fill_wait_s,
                "groups_filled": fill.groups if fill is not None else 0,
                "stale_tokens_masked": batch.stale_tokens_masked,
                "step_s": time.perf_counter() - started,
            }
            self._commit(batch, record, uri)
        self.world.barrier()
        self._set_status("waiting_rollouts")
        return True

    def _value_warmup(self) -> bool:
        """Whether this RL step fits only PPO's value head (`algorithm.value_warmup_steps`, counted from
        the first RL step: after `sft.steps`); it still consumes its groups and saves the next version."""
        algo = self.cfg.algorithm
        return algo.name == "ppo" and self.version - self.cfg.sft.steps < algo.value_warmup_steps

    # --- 1. collect (rank 0) ---

    def _collect(self) -> tuple[list[Group], float]:
        """Waits until `groups_per_step` groups within the staleness bound are owed and no group
        whose oldest token is of version `version - max_policy_lag` still rolls out (this is its
        last step within the bound), requesting rollouts as needed; takes the owed groups past or at
        the bound, then the oldest others up to `groups_per_step` trainable ones."""
        need = self.cfg.groups_per_step
        started = last_progress = time.monotonic()
        # read before the sweep: a group that completed by then is in the store
        forced = self._last_chance_pending()
        self.feed.sweep()
        bound_wait = 0.0  # seconds waited only for groups at their last step (enough were owed)
        while True:
            self._read_owed()
            self._top_up()
            self.source.check()
            enough = self._trainable() >= need
            if enough and (not forced or self._fills()):
                break  # with forced groups pending, the step trains while it waits for them (_Fill)
            polled = time.monotonic()
            last_progress = self._await_owed(
                last_progress,
                lambda forced=forced: (
                    f"{len(self._owed)} of {need} owed, {self.source.pending_groups()} pending, "
                    f"{forced} rolling out since version {self.version - self.cfg.max_policy_lag}"
                ),
            )
            if enough:
                bound_wait += time.monotonic() - polled
            was, forced = forced, self._last_chance_pending()
            if was and not forced:
                self.feed.sweep()  # the bus may lag the store: find the groups those batches completed
        self._wait = {
            "rollout_wait_bound_s": bound_wait,
            "groups_owed": len(self._owed),
            "groups_in_flight": self._owed_or_outstanding(),
        }
        self._filling = bool(forced)
        return self._take(self._choose(need)), time.monotonic() - started

    def _take(self, ids: list[str]) -> list[Group]:
        """These owed groups, taken from the feed (owed until their step commits)."""
        taken = self.feed.take_ids(ids)
        for group_id in taken:
            self._owed_oldest.pop(group_id)
        return [self._owed.pop(g) for g in taken]

    def _batch_of(self, groups: list[Group]) -> Batch:
        """The step's trees of these groups (past the bound: dropped and counted)."""
        self.sampler.observe(groups)  # before the next collect plans more
        cfg = self.cfg
        mask = cfg.stale_calls == "mask"
        batch = build_batch(groups, self.version, cfg.max_policy_lag, cfg.failed_reward, mask_stale=mask)
        self._count_lag(batch)
        return batch

    def _fills(self) -> bool:
        return self.cfg.max_groups_per_step > self.cfg.groups_per_step

    def _fill_round(self, taken: int) -> tuple[list[Group] | None, float]:
        """The next groups a step trains while a group at its last step within the bound still rolls
        out (`max_groups_per_step`), and the seconds waited for them: the owed groups at or past the
        bound, then the oldest trainable others while the step has fewer than `max_groups_per_step`.
        Once none is left rolling out at its last step: the owed ones at or past the bound, or None
        (the step is complete)."""
        started = last_progress = time.monotonic()
        if not self._filling:
            return None, 0.0
        bound = self.version - self.cfg.max_policy_lag
        while True:
            self._read_owed()
            self._top_up()
            self.source.check()
            if not self._last_chance_pending():
                self._filling = False
                self.feed.sweep()  # the bus may lag the store: find the groups that just completed
                self._read_owed()
                return self._take(self._choose(0)) or None, time.monotonic() - started  # those due
            ids = self._choose(self.cfg.max_groups_per_step - taken)
            if ids:
                return self._take(ids), time.monotonic() - started
            last_progress = self._await_owed(
                last_progress,
                lambda: f"step {self.version + 1} waits for groups rolling out since version {bound}",
            )

    def _await_owed(self, last_progress: float, waiting_for: Callable[[], str]) -> float:
        """Polls the bus once (up to 0.5 s) and reads the groups newly owed; the time of the last
        progress (one newly owed). Unavailable after `rollout_timeout_s` without any."""
        before = len(self._owed)
        self.feed.poll(block_s=0.5)
        self._read_owed()
        if len(self._owed) > before:
            return time.monotonic()
        if time.monotonic() - last_progress > self.cfg.rollout_timeout_s:
            raise Unavailable(
                f"no rollout group completed in {self.cfg.rollout_timeout_s:.0f} s ({waiting_for()})"
            )
        return last_progress

    def _read_owed(self) -> None:
        """Reads each newly owed group once (its calls give its versions); forgets groups no longer owed."""
        ready = self.feed.ready()
        for group_id in set(self._owed) - set(ready):
            del self._owed[group_id], self._owed_oldest[group_id]
        for group_id in ready:
            if group_id not in self._owed:
                group = self._owed[group_id] = self.store.get_group(group_id)
                oldest = oldest_version(group)
                # nothing to train: neither stale nor worth waiting for
                self._owed_oldest[group_id] = self.version if oldest is None else oldest

    def _trainable(self) -> int:
        """Owed groups within the staleness bound (`stale_calls: mask`: every owed group, its tokens past
        the bound masked; one whose last call too is past it drops, which the oldest-first take makes rare)."""
        if self.cfg.stale_calls == "mask":
            return len(self._owed_oldest)
        bound = self.version - self.cfg.max_policy_lag
        return sum(v >= bound for v in self._owed_oldest.values())

    def _choose(self, need: int) -> list[str]:
        """Every owed group past the staleness bound (to be dropped and counted) or at it (its last
        chance to train), then the oldest others until `need` trainable ones: oldest first keeps the
        next steps from having to wait."""
        bound = self.version - self.cfg.max_policy_lag
        oldest = self._owed_oldest
        by_age = sorted(self._owed, key=oldest.__getitem__)  # stable: announcement order breaks ties
        due = [g for g in by_age if oldest[g] <= bound]
        at_bound = sum(oldest[g] == bound for g in due)
        return due + [g for g in by_age if oldest[g] > bound][: max(0, need - at_bound)]

    def _last_chance_pending(self) -> int:
        """Groups still rolling out whose oldest generated token (recorded so far) is of version
        `version - max_policy_lag`: this step is the last that can train them. One with no token yet
        is younger than this step's bound whenever it started (its first call is served by this
        version or a newer one); one with an older token is past the bound and drops whatever we do."""
        bound = self.version - self.cfg.max_policy_lag
        if bound < 0 or self.cfg.stale_calls == "mask":  # masked, such a group's old tokens cost no wait
            return 0
        return sum(v == bound for v in self.store.open_group_versions(self.run_id).values())

    def _sampler_state(self) -> dict[str, list[float]]:
        return self.sampler.state() if self.sampler is not None else {}  # rank 0 holds the sampler

    def _top_up(self) -> None:
        """Requests groups until those owed and outstanding fill the steps that may train them: this
        step (sync), or this one and the next `max_policy_lag` (async; AReaL's (staleness + 1) ×
        batch size bound), never beyond the run's last step. Batches of at most `groups_per_step`."""
        ahead = self.cfg.max_policy_lag if self.cfg.mode == "async" else 0
        per_step = self.cfg.groups_per_step
        missing = per_step * min(1 + ahead, self.cfg.steps - self.version) - self._owed_or_outstanding()
        while missing > 0:
            n = min(per_step, missing)
            batch = plan_batch(self.cfg, self.sampler, self.run_id, self.version, self.rng, n_groups=n)
            self._requested_groups += n
            self.source.request(batch)
            missing -= n

    def _owed_or_outstanding(self) -> int:
        """Groups owed (less those known past the staleness bound: they train nothing) plus those
        requested that may still arrive. The source counts a group until its batch ends, which may
        be after the feed has seen it; groups requested minus groups arrived does not know of
        batches that failed. Both are upper bounds. The source is asked first, and the bus read
        after: a batch that ended by then has announced its groups."""
        pending = self.source.pending_groups()
        self.feed.poll(block_s=0)
        arrived = self.feed.arrived - self._arrived_before
        bound = self.version - self.cfg.max_policy_lag
        past = 0 if self.cfg.stale_calls == "mask" else sum(v < bound for v in self._owed_oldest.values())
        return len(self.feed.ready()) - past + max(0, min(pending, self._requested_groups - arrived))

    def _count_lag(self, batch: Batch) -> None:
        for lag in batch.lags:
            self.metrics.policy_lag.observe(lag)
        self.metrics.stale_rollouts.inc(batch.dropped_rollouts)
        self.metrics.dropped_groups.inc(len(batch.dropped))
        self.dropped_groups += len(batch.dropped)
        if batch.dropped:
            log.warning(
                "step %d: %d groups dropped, generated more than max_policy_lag (%d) versions ago",
                batch.version + 1, len(batch.dropped), self.cfg.max_policy_lag,
            )  # fmt: skip

    # --- 5. commit (rank 0) ---

    def _commit(self, batch: Batch, record: dict[str, Any], uri: str) -> None:
        """Registers the checkpoint with the groups it consumed (the commit point), then the rest."""
        consumed = batch.group_ids + self._untrained.group_ids
        by_harness = batch.by_harness()
        metrics = record | {
            f"harness/{h}/{k}": v for h, stats in by_harness.items() for k, v in stats.items()
        }
        version = record["version"]
        self.store.record_checkpoint(
            Checkpoint(self.run_id, version, version, uri, metrics, group_ids=tuple(consumed))
        )
        log.info("checkpoint %d at %s, consumed %d groups", version, uri, len(consumed))
        self._untrained = Batch(version=0)
        self.feed.consumed(consumed)
        self.store.record_train_step(self.run_id, version, metrics)
        ckpt.prune_checkpoints(self.cfg, version)
        self._reload_engines(version, uri)
        self.metrics.observe_step(record, by_harness)
        self.status = TrainerStatus(self.run_id, version, version, "publishing", metrics)
        critic = ""  # PPO: how much of the return variance the values GAE used explained
        if "explained_variance" in record:
            critic = f" explained variance {record['explained_variance']:.3f}"
        if record.get("value_warmup"):
            critic += " (value warm-up: policy frozen)"
        log.info(
            "step %d: loss %.4f reward %.3f kl %.4f mismatch %.4f lag %.2f %.0f tok/s%s",
            version, record.get("loss", 0.0), record["reward"], record.get("approx_kl", 0.0),
            record.get("logprob_mismatch", 0.0), record["policy_lag"], record["tokens_per_s"], critic,
        )  # fmt: skip
        mismatch = record.get("logprob_mismatch", 0.0)
        if record["policy_lag"] == 0 and mismatch > MISMATCH_WARNING and not self._warned_mismatch:
            self._warned_mismatch = True
            log.warning(
                "step %d: the engine's and the trainer's logprobs of the same tokens under the same weights "
                "differ by %.3f on average. Calls recorded without their sampling temperature are scored "
                "at trainer.algorithm.temperature (%.2f): were they sampled at another? (bf16 weights "
                "also differ by ~1e-2)",
                version, mismatch, self.cfg.algorithm.temperature,
            )  # fmt: skip

    def _save_next_version(self) -> tuple[int, str]:
        """After an update (RL or SFT): its checkpoint as the next version, which this becomes."""
        return_free_memory()  # the update's activations, for the rollouts until the next one
        self._set_status("publishing")
        version = self.version + 1
        uri = ckpt.version_uri(self.cfg, version)
        ckpt.save_checkpoint(
            self.policy, self.optimizer, self.scheduler, self.tokenizer, uri,
            {"version": version, "plan_rng": self.rng.bit_generator.state, "sampler": self._sampler_state()},
            self.world, with_optimizer=self.cfg.save_optimizer_state, lean_twin=ckpt.becomes_lean(self.cfg, version),
            served=self._served_weights(version) if self.world.size == 1 else None,
        )  # fmt: skip
        self.version = version
        return version, uri

    def _served_weights(self, version: int) -> dict[str, torch.Tensor]:
        """The policy's weights as engines serve them at `version` (one process), made once: with LoRA
        each is a merge of ~the model's size, which the checkpoint and the engines then share."""
        if self._served is None or self._served[0] != version:
            self._served = (version, ckpt.serving_weights(self.policy))
        return self._served[1]

    def _reload_engines(self, version: int, uri: str) -> None:
        """Tells every engine to serve `version` and checks that it does before the version counts as
        published. A refusal raises, naming version and uri: an engine left on old weights would
        silently feed the run rollouts that lag further every step, until all are dropped."""
        for i, engine in enumerate(self.engines):
            try:
                if _borrows(engine):  # an in-process torch engine computing with this trainer's tensors
                    self.runner.run(
                        engine.share_weights(version, self._served_weights(version)),
                        timeout_s=RELOAD_TIMEOUT_S,
                    )
                elif getattr(engine, "weight_sync", "files") in ("cuda_ipc", "copy"):
                    # an in-process engine copies the trainer's tensors: vLLM's workers on this GPU
                    # (CUDA IPC), or the torch engine into its own dtype
                    pushed = engine.push_weights(version, self._served_weights(version))
                    self.runner.run(pushed, timeout_s=RELOAD_TIMEOUT_S)
                else:
                    self.runner.run(engine.load_weights(version, uri), timeout_s=RELOAD_TIMEOUT_S)
                status = self.runner.run(engine.status(), timeout_s=RELOAD_TIMEOUT_S)
            except Exception as e:
                typed = type(e) if isinstance(e, ClawgymError) else ClawgymError
                raise typed(f"engine {i} did not load checkpoint {version} from {uri}: {e}") from e
            served = status.policy_version
            if "ready_replicas" in status.extra:  # a ReplicatedEngine: replicas out of service are left out
                self.metrics.ready_replicas.set(status.extra["ready_replicas"])
                self.metrics.excluded_replicas.set(status.extra.get("excluded_total", 0.0))
                if status.extra["ready_replicas"] < status.extra["replicas"]:
                    log.warning(
                        "checkpoint %d is served by %.0f of %.0f inference replicas (the others are out of "
                        "service and get it when they answer again)",
                        version, status.extra["ready_replicas"], status.extra["replicas"],
                    )  # fmt: skip
            if served < version:
                raise FailedPrecondition(
                    f"engine {i} accepted checkpoint {version} from {uri} but serves version {served}"
                )
        self._served = None  # a merged copy is the engines' now, or no longer needed

    def _lending(self) -> bool:
        return any(_borrows(e) for e in self.engines)

    def _hold_borrowers(self, *_) -> None:
        """The optimizer's step pre-hook when engines compute with the trainer's own tensors (`weight_sync`
        shared): parks them before the weights change, until `_reload_engines` hands them the committed
        version. A step that fails after this leaves them parked: their weights are then no version's."""
        for engine in self.engines:
            if _borrows(engine):
                self.runner.run(engine.hold(), timeout_s=RELOAD_TIMEOUT_S)

    def _set_status(self, state: str) -> None:
        s = self.status
        self.status = TrainerStatus(self.run_id, self.version, self.version, state, s.metrics)

    # --- SFT steps (algorithm sft, or a warm start's first sft.steps) ---

    def _sft_step(self) -> bool:
        """A supervised step: the next demonstrations (`demonstrations.py`) instead of collected groups,
        the NLL update (`sft.py`), then save, commit and publish as an RL step does; no group consumed."""
        shards = None
        if self.world.is_main:
            assert self.demonstrations is not None, "an SFT step needs the trainer's demonstrations"
            per_rank, n_groups, epoch = self.demonstrations.step_trees(self.version, self.world.size)
            trees = [t for mine in per_rank for t in mine]
            norm = Normaliser.of(trees)
            shards = [(mine, norm) for mine in per_rank]
        my_trees, norm = self.world.scatter(shards)
        self._set_status("training")
        started = time.perf_counter()
        lr = self.scheduler.get_last_lr()[0]
        if self.cfg.sft.lr is not None:  # the scheduler's next step sets its own value back
            lr = self.cfg.sft.lr
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        with torch_threads(self.sft_threads):
            threads = torch.get_num_threads()
            packs = sft_packs(my_trees, self.cfg.algorithm, norm, self.cfg.micro_batch_tokens)
            diagnostics = sft_update(
                self.policy.module, self.optimizer, packs, self.cfg.algorithm, self.world
            )
        self.scheduler.step()
        update_s = time.perf_counter() - started
        version, uri = self._save_next_version()
        if self.world.is_main:
            tokens = sum(t.flat.n_positions for t in trees)
            record = {
                **diagnostics, "stage": "sft", "lr": lr, "version": version, "groups": n_groups,
                "rollouts": sum(len(t.rewards) for t in trees), "sft_tokens": norm.generated,
                "sft_epoch": epoch, "sharing_ratio": Batch(self.version, trees).sharing_ratio(),
                "tokens": tokens, "tokens_per_s": tokens / max(update_s, 1e-9), "update_s": update_s,
                "step_s": time.perf_counter() - started, "torch_threads": threads,
            }  # fmt: skip
            self.store.record_checkpoint(Checkpoint(self.run_id, version, version, uri, record))
            self.store.record_train_step(self.run_id, version, record)
            ckpt.prune_checkpoints(self.cfg, version)
            self._reload_engines(version, uri)
            self.metrics.observe_step(record, {})
            self.status = TrainerStatus(self.run_id, version, version, "publishing", record)
            log.info("checkpoint %d at %s (SFT)", version, uri)
            log.info(
                "step %d (SFT): loss %.4f over %d demonstrated tokens, epoch %.2f, %.0f tok/s",
                version, record["loss"], norm.generated, epoch, record["tokens_per_s"],
            )  # fmt: skip
        self.world.barrier()
        self._set_status("waiting_rollouts")
        return True

    def cancel_rollouts(self) -> None:
        """Cancels the batches still rolling out (an async prefetch when the run stops early): they
        would compete with what comes next, and no step will train them."""
        if self.source is not None:
            self.source.cancel()

    def close(self) -> None:
        """Releases the rollout source and the loop thread this trainer made (not the store or engines)."""
        if self.source is not None:
            self.source.close()
        if self._close_runner and self.runner is not None:
            self.runner.close()


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """The calling thread computes on `n` torch intra-op threads in the block (0: as it does); with
    OpenMP the count is the calling thread's own, so an engine's loop thread keeps its share."""
    before = torch.get_num_threads()
    if n <= 0 or n == before:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class _Fill:
    """The rounds of groups a step trains while it waits for groups at their last step within the
    staleness bound (`update.Fill`): rank 0 takes them (`Trainer._fill_round`) into the step's batch,
    every rank packs its share with the step's first normaliser; the last round tells every rank the
    rescale to the whole step's normaliser."""

    def __init__(self, trainer: Trainer, batch: Batch | None, norm: Normaliser) -> None:
        self.trainer, self.batch, self.norm = trainer, batch, norm
        self.groups = 0  # groups added (rank 0)
        self.wait_s = 0.0  # seconds rank 0 waited for them
        self._rescale = 1.0

    def next_packs(self) -> list[PackedSequence] | None:
        t, shards = self.trainer, None
        if t.world.is_main:
            groups, waited = t._fill_round(len(self.batch.group_ids))
            self.wait_s += waited
            if groups is None:
                whole = Normaliser.of(self.batch.trees)
                shards = [("done", self.norm.ratio(whole, t.cfg.algorithm.aggregation))] * t.world.size
            else:
                more = t._batch_of(groups)
                self.batch.extend(more)
                self.groups += len(groups)
                shards = [("trees", trees) for trees in assign_to_ranks(more.trees, t.world.size)]
        kind, payload = t.world.scatter(shards)
        if kind == "done":
            self._rescale = payload
            return None
        algo = t.cfg.algorithm
        budget, merge = t.cfg.micro_batch_tokens, t.cfg.merge_group_trees
        return prepare_packs(t.policy.module, payload, algo, self.norm, budget, t.world, merge)

    def rescale(self) -> float:
        return self._rescale


def _borrows(engine: Any) -> bool:
    """Whether an engine computes with the trainer's own tensors (`inference.weight_sync` shared)."""
    return getattr(engine, "weight_sync", "files") == "shared"


def _in_process(engine: Any) -> bool:
    """Whether an engine takes the trainer's tensors, not files (`inference.weight_sync` shared or copy)."""
    return getattr(engine, "weight_sync", "files") in ("shared", "copy")
