"""The oracle teacher through real harnesses: the proxy answers each call with the task's reference
solution in the harness's own action format, the real harness runs it in a real local sandbox, the
task's verifier scores it, and the calls are recorded as a teacher's, in the policy's tokens. An SFT
step then trains on them through the trainer's own SFT path.

The proxy is the real app on a loopback port with the tiny-qwen3 tokenizer and a real SQLite store;
its engine is scripted with nothing: the oracle answers every call, the policy none."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

from clawgym.harnesses.registry import get_harness
from clawgym.inference.scripted import ScriptedEngine
from clawgym.orchestrator.attempt import run_task
from clawgym.policies import load_model, load_tokenizer
from clawgym.proxy.app import create_app
from clawgym.proxy.config import ProxyConfig
from clawgym.proxy.serving import ServerThread
from clawgym.records import RolloutSpec, is_teacher
from clawgym.store.sql import SqlStore
from clawgym.tasks.loader import load_tasks
from clawgym.tasks.mini.generate import mini_suite_dir
from clawgym.trainer.config import TrainerConfig
from clawgym.trainer.demonstrations import Demonstrations, select, store_groups
from clawgym.trainer.loop import Trainer
from clawgym.trainer.loop_thread import LoopThread
from clawgym.trainer.toy import ToyRolloutSource
from tests.trainer.test_sft import mean_nll

FAMILIES = ("write_word", "make_dir", "copy_file")


def mini_tasks(suite: Path, families=FAMILIES):
    """The first held-out task of each family."""
    tasks = load_tasks(suite, split="test")
    return [next(t for t in tasks if t.metadata["family"] == f) for f in families]


def collect(adapter, tasks, suite: Path, backend, db: Path) -> tuple[SqlStore, str, list]:
    """Each task once through `adapter` with the oracle teacher answering; rewards recorded as the
    orchestrator records them. (store, run id, outcomes)."""
    tokenizer = load_tokenizer("tiny-qwen3")
    store = SqlStore(f"sqlite:///{db}")
    engine = ScriptedEngine([], vocab_size=len(tokenizer), max_context=32768, model="tiny-qwen3")
    cfg = ProxyConfig(teacher={"kind": "oracle", "suites": [str(suite)]})
    run = store.create_run("oracle-demos", {"kind": "demonstrations"})
    outcomes = []
    with ServerThread(create_app(cfg, engine, store, tokenizer), cfg) as server:
        for task in tasks:
            spec = RolloutSpec(group_id=f"g-{task.id}", task_id=task.id, harness=adapter.name)
            (reg,) = store.register_rollouts(run.id, [spec])
            store.start_rollout(reg.rollout_id)
            outcome = asyncio.run(
                run_task(adapter, task, backend, proxy_url=server.url, token=reg.token, model="policy")
            )
            reward = outcome.verdict.reward
            store.finish_rollout(reg.rollout_id, "finished", reward=reward, passed=reward >= 1.0)
            outcomes.append((task, reg.rollout_id, outcome))
    assert engine.prompts == [], "the policy's engine generated nothing: the oracle answered every call"
    return store, run.id, outcomes


def assert_solved_by_the_teacher(store: SqlStore, outcomes, min_calls: int = 2) -> None:
    for task, rollout_id, outcome in outcomes:
        assert outcome.verdict.reward == 1.0, (
            f"{task.id}: {outcome.verdict.detail}\n{outcome.harness_output[-3000:]}"
        )
        calls = store.list_calls(rollout_id)
        assert len(calls) >= min_calls, f"{task.id}: act, then finish: {len(calls)} calls"
        assert all(is_teacher(c) and c.response["_clawgym"]["teacher"] == "oracle" for c in calls), (
            f"{task.id}: every call is marked as the oracle's"
        )
        assert all(np.isnan(c.output_logprobs).all() for c in calls), "a teacher's tokens carry no logprob"


def test_the_oracle_solves_mini_tasks_through_the_reference_harness_and_sft_trains_on_them(tmp_path, backend):
    """Fenced bash holding each task's solution script, then DONE: reward 1 on three families; the
    demonstrations (teacher_only, min_reward 1) make one SFT step of the trainer, which lowers their NLL."""
    suite = mini_suite_dir(tmp_path / "suite")
    tasks = mini_tasks(suite)
    store, run_id, outcomes = collect(get_harness("reference"), tasks, suite, backend, tmp_path / "store.db")
    try:
        assert_solved_by_the_teacher(store, outcomes)
        tokenizer = load_tokenizer("tiny-qwen3")
        first = store.list_calls(outcomes[0][1])[0]
        solution = (tasks[0].source_dir / "solution" / "solve.sh").read_text().split("\n", 1)[1].strip()
        assert tokenizer.decode(first.output_ids) == f"```bash\n{solution}\n```<|im_end|>", (
            "the first answer is the solution script in the reference harness's fence, in the policy's tokens"
        )
        demos = Demonstrations.of(select(store_groups(store, run_id), 1.0, teacher_only=True), 3, seed=0)
        assert demos.rollouts == 3
        sft_one_step(store, run_id, demos, tmp_path)
    finally:
        store.close()


def sft_one_step(store: SqlStore, run_id: str, demos: Demonstrations, tmp_path: Path) -> None:
    """One step of the trainer with algorithm sft on `demos`: recorded as an SFT step, loss = their NLL."""
    cfg = TrainerConfig(
        model="tiny-qwen3", run_name="sft-on-oracle", steps=1, groups_per_step=3,
        checkpoint_uri=str(tmp_path / "checkpoints"), run_dir=str(tmp_path / "run"),
        algorithm={"name": "sft", "lr": 1e-3}, sft={"run_id": run_id, "teacher_only": True, "min_reward": 1.0},
    )  # fmt: skip
    before = mean_nll(load_model("tiny-qwen3"), demos)
    runner = LoopThread()
    tokenizer = load_tokenizer("tiny-qwen3")
    trainer = Trainer(cfg, store=store, bus=store.bus, source=ToyRolloutSource(store, None, tokenizer, runner),
                      tokenizer=tokenizer, engines=[], runner=runner, demonstrations=demos)  # fmt: skip
    try:
        trainer.run()
        after = mean_nll(trainer.policy.module.lm, demos)
    finally:
        trainer.close()
        runner.close()
    (step,) = store.list_train_steps(trainer.run_id)
    assert step.metrics["stage"] == "sft" and step.metrics["sft_tokens"] == demos.tokens
    assert step.metrics["loss"] == pytest.approx(before, rel=1e-4), (
        "the step's loss is the demonstrations' NLL"
    )
    assert after < before, f"one SFT step makes the oracle's answers likelier: {before:.4f} -> {after:.4f}"


@pytest.mark.harness
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["text", "tools"])
def test_the_oracle_solves_mini_tasks_through_the_real_mini_swe_agent(tmp_path, backend, mode):
    """The real mini-swe-agent CLI: its `mswea_bash_command` block (text mode) or its bash tool call
    (tools mode) runs the solution, then its submit command ends the run; reward 1, teacher calls."""
    adapter = get_harness("mini-swe-agent", mode=mode)
    adapter.install()
    suite = mini_suite_dir(tmp_path / "suite")
    tasks = mini_tasks(suite, FAMILIES[:2])
    store, _, outcomes = collect(adapter, tasks, suite, backend, tmp_path / "store.db")
    try:
        assert_solved_by_the_teacher(store, outcomes)
        message = store.list_calls(outcomes[0][1])[0].response["choices"][0]["message"]
        if mode == "text":
            assert "```mswea_bash_command\n" in message["content"], message
        else:
            assert [c["function"]["name"] for c in message["tool_calls"]] == ["bash"], message
    finally:
        store.close()


@pytest.mark.harness
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["text", "tools"])
def test_mini_swe_agents_direct_client_gives_the_policy_the_prompts_litellm_gives(tmp_path, backend, mode):
    """`client: direct` (its OpenRouter model classes pointed at the proxy, no litellm): the real CLI
    solves the task, and every call's prompt, in the policy's tokens, is the one litellm sends."""
    suite = mini_suite_dir(tmp_path / "suite")
    tasks = mini_tasks(suite, FAMILIES[:1])
    prompts = {}
    for client in ("litellm", "direct"):
        adapter = get_harness("mini-swe-agent", mode=mode, client=client)
        adapter.install()
        store, _, outcomes = collect(adapter, tasks, suite, backend, tmp_path / f"{client}.db")
        try:
            assert_solved_by_the_teacher(store, outcomes)
            prompts[client] = [c.prompt_ids.tolist() for c in store.list_calls(outcomes[0][1])]
        finally:
            store.close()
    assert len(prompts["direct"]) == len(prompts["litellm"]) >= 2
    assert prompts["direct"] == prompts["litellm"], "the same conversation, token for token"


@pytest.mark.harness
@pytest.mark.slow
def test_the_oracle_solves_mini_tasks_through_the_real_opencode(tmp_path, backend):
    """The real opencode CLI: its title call gets a title, its agent call one `bash` tool call of
    the solution (a script of several lines), and once opencode sends that call back with its output,
    a reply without a call ends the run: reward 1, every call the oracle's, the solution run once."""
    adapter = get_harness("opencode")
    adapter.install()
    suite = mini_suite_dir(tmp_path / "suite")
    tasks = mini_tasks(suite, FAMILIES[:2])
    store, _, outcomes = collect(adapter, tasks, suite, backend, tmp_path / "store.db")
    try:
        assert_solved_by_the_teacher(store, outcomes, min_calls=3)
        for task, rollout_id, _ in outcomes:
            messages = [c.response["choices"][0]["message"] for c in store.list_calls(rollout_id)]
            acts = [m for m in messages if m.get("tool_calls")]
            assert [c["function"]["name"] for m in acts for c in m["tool_calls"]] == ["bash"], (
                f"{task.id}: the solution runs once: {messages}"
            )
            assert "\n" in json.loads(acts[0]["tool_calls"][0]["function"]["arguments"])["command"]
            texts = [m["content"] for m in messages if not m.get("tool_calls")]
            assert not any("```" in t for t in texts), f"{task.id}: the title and the end are text: {texts}"
    finally:
        store.close()
