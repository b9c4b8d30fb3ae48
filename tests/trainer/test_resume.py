"""Resume after SIGKILL: a real `clawgym serve trainer` process, killed at random points, restarted.

The run is on PostgreSQL + Redis. The rollouts come from the toy source inside the trainer process
(its torch engine), so a kill also kills rollouts in flight. Asserted through the store:
1. versions 1..N are registered once each, in order (no step lost or done twice);
2. no group is trained by two committed steps (each step's record lists what it trained on);
3. every group that was complete and owed when the trainer was killed is consumed afterwards
   (none lost: pending bus entries are claimed, lost announcements swept);
4. the optimizer state continued: AdamW's step count in the last checkpoint equals N.
"""

import itertools
import json
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
import yaml

from clawgym.store.bus import make_bus
from clawgym.store.bus_memory import MemoryBus
from clawgym.store.sql import SqlStore

KILLS = 3
STARTUP_TIMEOUT_S = 240


class TrainerProcess:
    """`python -m clawgym_services.trainer -c run.yaml`, its log collected by a reader thread."""

    def __init__(self, config: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "clawgym_services.trainer", "-c", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self.started = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)
            if "trainer: run" in line:  # the run is resolved, the checkpoint loaded, the feed joined
                self.started.set()

    def log(self) -> str:
        return "".join(self.lines[-40:])


def _write_config(path: Path, pg_url: str, redis_url: str, checkpoints: Path, steps: int) -> None:
    config = {
        "store": {"url": pg_url, "bus_url": redis_url},
        "rpc": {"secret": "resume-test-secret"},  # the trainer service's Status requires one
        "trainer": {
            "model": "tiny-qwen3",
            "rollout_source": "toy",
            "run_name": "resume",
            "steps": steps,
            "group_size": 2,
            "groups_per_step": 2,
            "checkpoint_uri": str(checkpoints),
            "keep_checkpoints": 2,
            "port": 0,
            "metrics_port": 0,
            "sweep_interval_s": 1.0,
            "algorithm": {"lr": 1e-3},
        },
    }
    path.write_text(yaml.safe_dump(config))


@pytest.mark.slow
def test_a_trainer_killed_at_random_points_continues_without_training_a_group_twice_or_losing_one(
    pg_url, redis_url, tmp_path
):
    rng = random.Random(20261130)
    config = tmp_path / "run.yaml"
    checkpoints = tmp_path / "checkpoints"
    _write_config(config, pg_url, redis_url, checkpoints, steps=1000)
    store = SqlStore(pg_url, make_bus(redis_url))
    owed_at_kill: list[set[str]] = []
    run_id = ""
    try:
        for kill in range(KILLS):
            trainer = TrainerProcess(config)
            assert trainer.started.wait(STARTUP_TIMEOUT_S), f"trainer did not start:\n{trainer.log()}"
            time.sleep(rng.uniform(0.5, 6.0))  # somewhere in collect / update / save / commit
            assert trainer.proc.poll() is None, f"trainer exited before kill {kill}:\n{trainer.log()}"
            trainer.proc.send_signal(signal.SIGKILL)
            trainer.proc.wait(30)
            run_id = json.loads((checkpoints / "resume" / "run.json").read_text())["run_id"]
            owed_at_kill.append(set(store.list_unconsumed_groups(run_id)))
        done = [c.version for c in store.list_checkpoints(run_id)]
        final_version = (done[-1] if done else 0) + 3  # at least three steps after the last kill
        _write_config(config, pg_url, redis_url, checkpoints, steps=final_version)
        trainer = TrainerProcess(config)
        try:
            code = trainer.proc.wait(STARTUP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            trainer.proc.kill()
            pytest.fail(f"the final trainer did not finish in {STARTUP_TIMEOUT_S} s:\n{trainer.log()}")
        assert code == 0, f"the final trainer failed:\n{trainer.log()}"

        checkpoints_recorded = store.list_checkpoints(run_id)
        versions = [c.version for c in checkpoints_recorded]
        assert versions == list(range(1, final_version + 1)), (
            f"every version exactly once, in order: {versions}"
        )
        assert all(c.step == c.version for c in checkpoints_recorded), "version v is the checkpoint of step v"
        consumed = [set(c.group_ids) for c in checkpoints_recorded]
        trained = [
            set(c.metrics["trained_groups"]) for c in checkpoints_recorded
        ]  # what each step trained on
        for v, t, c in zip(versions, trained, consumed, strict=True):
            assert t and t <= c, (
                f"step {v} trained on {t - c or 'nothing'} beyond what its checkpoint consumed"
            )
        for (va, a), (vb, b) in itertools.combinations(zip(versions, trained, strict=True), 2):
            assert not a & b, f"groups {a & b} were trained by both step {va} and step {vb}"
        all_consumed = set().union(*consumed)
        for k, owed in enumerate(owed_at_kill):
            assert owed <= all_consumed, f"groups owed at kill {k} were never trained: {owed - all_consumed}"
        state = torch.load(
            checkpoints / "resume" / f"v{final_version:06d}" / "trainer_state.pt", weights_only=False
        )
        adam_steps = {int(s["step"]) for s in state["optimizer"]["state"].values()}
        assert adam_steps == {final_version}, (
            f"AdamW must have continued across restarts: {adam_steps} steps vs version {final_version}"
        )
    finally:
        store.close()


@pytest.mark.parametrize("variant", ["ppo", "lora"])
def test_a_new_trainer_resumes_the_value_head_and_adapters_of_the_last_checkpoint(
    variant, sqlite_url, trainer_cfg, make_trainer
):
    """After one step, a fresh Trainer on the same run starts at version 1 with the trained value
    head (PPO) or LoRA adapters, and AdamW's state of that step."""
    extra = (
        {"algorithm": {"name": "ppo", "lr": 1e-3}}
        if variant == "ppo"
        else {"lora": {"enabled": True, "r": 4}}
    )
    cfg = trainer_cfg(steps=2, **extra)
    store = SqlStore(sqlite_url, MemoryBus())
    try:
        first = make_trainer(cfg, store)
        first.run(steps=1)
        trained = {k: v.clone() for k, v in first.policy.module.state_dict().items()}
        second = make_trainer(cfg, store)
        second.start()
        assert second.version == 1 and second.run_id == first.run_id, "the new trainer must continue the run"
        resumed = second.policy.module.state_dict()
        keys = [k for k in trained if ("value_head" in k if variant == "ppo" else "lora_" in k)]
        assert keys, f"test setup: the {variant} policy must have {variant} parameters"
        for k in keys:
            torch.testing.assert_close(resumed[k], trained[k], msg=f"{k} was not restored")
        steps = {int(s["step"]) for s in second.optimizer.state_dict()["state"].values()}
        assert steps == {1}, f"the optimizer state of step 1 must be restored, got steps {steps}"
    finally:
        store.close()


def test_a_checkpoint_without_optimizer_state_is_smaller_and_resumes_with_fresh_moments(
    sqlite_url, trainer_cfg, make_trainer, caplog
):
    """`save_optimizer_state: false` (the quickstart's): trainer_state.pt holds no moments, and a new
    trainer continues the run from it at version 1 with an empty optimizer state, saying so."""
    store = SqlStore(sqlite_url, MemoryBus())
    try:
        sizes = {}
        for keep in (True, False):
            cfg = trainer_cfg(steps=2, run_name=f"optimizer-{keep}", save_optimizer_state=keep)
            trainer = make_trainer(cfg, store)
            trainer.run(steps=1)
            state_file = Path(cfg.checkpoint_uri) / cfg.run_name / "v000001" / "trainer_state.pt"
            sizes[keep] = state_file.stat().st_size
            saved = torch.load(state_file, weights_only=False)
            assert (saved["optimizer"] is not None) is keep, f"save_optimizer_state={keep}"
            assert saved["scheduler"] and saved["version"] == 1, "the rest of the state is always written"
        assert sizes[False] < sizes[True] / 2, f"the moments are most of the state file: {sizes}"
        with caplog.at_level("WARNING", logger="clawgym.trainer.loop"):
            resumed = make_trainer(cfg, store)
            resumed.start()
        assert resumed.version == 1 and resumed.run_id == trainer.run_id, "it continues the run"
        assert resumed.optimizer.state_dict()["state"] == {}, "the moments start afresh"
        assert "holds no optimizer state" in caplog.text, "a resume without moments is said out loud"
    finally:
        store.close()


def test_signal_sampling_evidence_is_saved_with_the_checkpoint_and_resumed(
    sqlite_url, trainer_cfg, make_trainer
):
    """The sampler's per-family evidence (what its next draws depend on) is part of the checkpoint's
    state: a new trainer on the run draws on from it instead of starting with no opinion."""
    cfg = trainer_cfg(steps=2, run_name="sampling", sampling={"mode": "signal", "half_life_steps": 2})
    store = SqlStore(sqlite_url, MemoryBus())
    try:
        first = make_trainer(cfg, store)
        first.run(steps=1)
        evidence = first.sampler.state()
        seen = sum(p + f for p, f in evidence.values())
        assert seen == cfg.groups_per_step * cfg.group_size, f"each trained rollout is evidence: {evidence}"
        saved = torch.load(
            Path(cfg.checkpoint_uri) / cfg.run_name / "v000001" / "trainer_state.pt", weights_only=False
        )
        assert saved["sampler"] == evidence
        resumed = make_trainer(cfg, store)
        resumed.start()
        assert resumed.sampler.state() == evidence and resumed.sampler.weights() == first.sampler.weights()
    finally:
        store.close()
