"""Fixtures of the trainer tests: tiny-qwen3 (real model, tokenizer, torch engine), stores, trainers.

Everything runs for real on CPU: the torch engine generates the toy rollouts (so engine logprobs
are real), the store is SQLite or PostgreSQL, the bus in-process or Redis.
"""

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from clawgym.inference.torch_engine import TorchEngine
from clawgym.policies import load_model, load_tokenizer
from clawgym.records import Call, Group, Rollout, RolloutWithCalls
from clawgym.store.bus import make_bus
from clawgym.store.sql import SqlStore
from clawgym.trainer.config import TrainerConfig
from clawgym.trainer.loop import Trainer
from clawgym.trainer.loop_thread import LoopThread
from clawgym.trainer.toy import ToyRolloutSource


@pytest.fixture(scope="session")
def tiny_tok():
    return load_tokenizer("tiny-qwen3")


@pytest.fixture
def runner() -> Iterator[LoopThread]:
    r = LoopThread()
    yield r
    r.close()


@pytest.fixture
def engine(runner: LoopThread) -> Iterator[TorchEngine]:
    """A torch engine on a private tiny-qwen3 (reloads change its weights)."""
    e = TorchEngine(load_model("tiny-qwen3"), name="tiny-qwen3")
    yield e
    runner.run(e.aclose())


@pytest.fixture
def trainer_cfg(tmp_path: Path) -> Callable[..., TrainerConfig]:
    """trainer_cfg(**overrides): a small, fast run of tiny-qwen3 writing checkpoints under tmp_path."""

    def make(**overrides) -> TrainerConfig:
        fields = {
            "model": "tiny-qwen3",
            "run_name": "test-run",
            "steps": 2,
            "group_size": 3,
            "groups_per_step": 2,
            "checkpoint_uri": str(tmp_path / "checkpoints"),
            "run_dir": str(tmp_path / "run"),
            "sweep_interval_s": 1.0,
            "rollout_timeout_s": 120.0,
            "algorithm": {"lr": 1e-3},
        }
        return TrainerConfig(**(fields | overrides))

    return make


@pytest.fixture
def make_trainer(tiny_tok, runner, engine) -> Iterator[Callable[..., Trainer]]:
    """make_trainer(cfg, store, engines=None): a trainer on `store` whose toy rollouts `engine` generates."""
    made: list[Trainer] = []

    def make(cfg: TrainerConfig, store: SqlStore, engines=None, **toy) -> Trainer:
        source = ToyRolloutSource(store, engine, tiny_tok, runner, **toy)
        trainer = Trainer(
            cfg,
            store=store,
            bus=store.bus,
            source=source,
            tokenizer=tiny_tok,
            engines=[engine] if engines is None else engines,
            runner=runner,
        )
        made.append(trainer)
        return trainer

    yield make
    for t in made:
        t.close()


@pytest.fixture
def sql_store(store_url: str, bus_url: str) -> Iterator[SqlStore]:
    """A SqlStore on each backend × each bus."""
    s = SqlStore(store_url, make_bus(bus_url))
    yield s
    s.close()


def _hand_group(
    group_id: str, prompt: list[int], outputs: list[list[int]], rewards: list[float], version: int = 0
):
    """A group written by hand: the same prompt, one call per rollout with the given output ids."""
    rollouts = []
    for i, (out, reward) in enumerate(zip(outputs, rewards, strict=True)):
        rid = f"{group_id}-r{i}"
        call = Call(
            rollout_id=rid,
            seq=0,
            protocol="openai_chat",
            request={},
            response={},
            prompt_ids=np.asarray(prompt, np.int32),
            output_ids=np.asarray(out, np.int32),
            output_logprobs=np.full(len(out), -8.0, np.float32),
            output_versions=np.full(len(out), version, np.int32),
            policy_version=version,
            finish_reason="stop",
        )
        rollout = Rollout(
            id=rid, run_id="run", group_id=group_id, task_id="t", harness="reference", status="finished",
            reward=reward, passed=reward > 0, error="", policy_version_start=version, sandbox="",
            timings={}, created_at=0.0,
        )  # fmt: skip
        rollouts.append(RolloutWithCalls(rollout, [call]))
    return Group(id=group_id, run_id="run", rollouts=rollouts)


@pytest.fixture(scope="session")
def hand_group():
    """hand_group(group_id, prompt, outputs, rewards, version=0) → a Group record (not in any store);
    its engine logprobs are all -8."""
    return _hand_group
