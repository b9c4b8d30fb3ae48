"""Fixtures of the end-to-end training tests: a trivially learnable suite and a warm tiny policy.

- `learnable`: (suite folder, warm policy folder, train task ids). The policy is tiny-qwen3
  fine-tuned on the reference harness's exact first prompt of each task, captured through the real
  embedded stack (proxy → store), so it answers `touch ok.txt` (right) or `touch no.txt` (wrong)
  about equally often (see learnable.py).
- `learnable_run`: `learnable_run(store=…, evaluation=…, harness_settings=…, **trainer)`, the config
  (as data) of a GRPO run of that policy on that suite through the reference harness; keyword
  arguments override.
- `one_thread`: torch on one intra-op thread for the test (on a shared 2-core machine two threads
  waiting on each other's barrier run several times slower than one).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from clawgym.config import ClawgymConfig
from clawgym.orchestrator.interface import Batch, RolloutRequest, collect
from clawgym.tasks.loader import load_tasks
from clawgym_app.runtime import Runtime

HERE = Path(__file__).resolve().parent


def _learnable_module():
    spec = importlib.util.spec_from_file_location("clawgym_tests_learnable", HERE / "learnable.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


learnable_mod = _learnable_module()


@dataclass(frozen=True)
class Learnable:
    suite: Path
    policy: Path
    train_ids: list[str]
    test_ids: list[str]


@pytest.fixture
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def learnable(tmp_path_factory) -> Learnable:
    root = tmp_path_factory.mktemp("learnable")
    suite = learnable_mod.write_suite(root / "suite")
    tasks = load_tasks(suite)
    cfg = ClawgymConfig(
        store={"url": f"sqlite:///{root / 'capture.db'}"},
        proxy={"max_new_tokens": 2},
        orchestrator={"harness_settings": {"reference": {"max_turns": 1, "max_tokens": 2}}},
        trainer={"model": "tiny-qwen3", "checkpoint_uri": str(root / "checkpoints")},
    )
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with Runtime.open(cfg) as rt:
            run = rt.store.create_run("capture-prompts")
            batch = Batch(run.id, [RolloutRequest(t.id, "reference") for t in tasks], suite=str(suite),
                          proxy_url=rt.proxy_url)  # fmt: skip
            finals = rt.loop.run(collect(rt.rollouts, batch))
            prompts = {s.task_id: rt.store.list_calls(s.rollout_id)[0].prompt_ids.tolist() for s in finals}
            policy = learnable_mod.warm_start([prompts[t.id] for t in tasks], rt.tokenizer, root / "warm")
    finally:
        torch.set_num_threads(before)
    return Learnable(
        suite,
        policy,
        [t.id for t in tasks if t.split == "train"],
        [t.id for t in tasks if t.split == "test"],
    )


@pytest.fixture
def learnable_run(learnable, tmp_path):
    """learnable_run(store=None, evaluation=None, harness_settings=None, **trainer) → a run config as
    data (see the module doc)."""

    def make(
        *, store: dict | None = None, evaluation: dict | None = None, harness_settings: dict | None = None,
        **trainer,
    ) -> dict:  # fmt: skip
        return {
            "store": store or {"url": f"sqlite:///{tmp_path / 'store.db'}"},
            "proxy": {"max_new_tokens": 16, "temperature": 1.0},
            "orchestrator": {
                "max_concurrent_rollouts": 8,
                "retry_backoff_s": 0.1,
                "harness_settings": harness_settings or {},
            },
            "trainer": {
                "model": str(learnable.policy),
                "algorithm": {"name": "grpo", "lr": 1.5e-4},
                "suite": str(learnable.suite),
                "checkpoint_uri": str(tmp_path / "checkpoints"),
                "keep_checkpoints": 1,
                "sweep_interval_s": 1.0,
                "rollout_timeout_s": 300.0,
                **trainer,
            },
            "evaluation": evaluation or {"samples": 1, "split": "test"},
        }

    return make
