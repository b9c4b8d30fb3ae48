"""The judge client against the project's proxy: a wrong key is an HTTP error said as such and not
retried; an unreachable judge is retried, then reported; neither is ever a score."""

from __future__ import annotations

import asyncio
from pathlib import Path

from clawgym.inference.scripted import ScriptedEngine
from clawgym.judge.client import Judge
from clawgym.judge.config import JudgeConfig
from clawgym.judge.evidence import Evidence
from clawgym.policies import load_tokenizer
from clawgym.proxy.app import create_app
from clawgym.proxy.config import ProxyConfig
from clawgym.proxy.serving import ServerThread
from clawgym.records import RolloutSpec
from clawgym.store.sql import SqlStore
from clawgym.tasks.rubric import Rubric, RubricRule
from clawgym_app.runtime.services import free_port

RUBRIC = Rubric((RubricRule("Clarity", "a.md", {"0": "bad", "1": "good"}),))


def _judge(cfg: JudgeConfig):
    async def go():
        judge = Judge(cfg)
        try:
            return await judge.judge("Write a.md.", RUBRIC, Evidence({"a.md": "hi"}))
        finally:
            await judge.close()

    return asyncio.run(go())


def test_a_judge_refusing_the_key_is_reported_once_and_an_unreachable_one_after_its_retries(
    tmp_path: Path, monkeypatch
) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'judge.db'}")
    run = store.create_run("judge")
    [session] = store.register_rollouts(run.id, [RolloutSpec("g", "t", "judge")])
    engine = ScriptedEngine.from_texts(load_tokenizer("tiny-qwen3"), ['{"score": 1}'], max_context=8192)
    with ServerThread(create_app(ProxyConfig(), engine, store, load_tokenizer("tiny-qwen3"))) as server:
        base = f"{server.url}/v1"
        monkeypatch.setenv("TEST_JUDGE_KEY", "not-a-rollout-key")
        refused = _judge(JudgeConfig(base_url=base, model="m", api_key_env="TEST_JUDGE_KEY", retry_backoff_s=0))
        monkeypatch.setenv("TEST_JUDGE_KEY", session.token)
        ok = _judge(JudgeConfig(base_url=base, model="m", api_key_env="TEST_JUDGE_KEY"))
    store.close()
    assert refused.score is None and refused.attempts == 1, "a 401 is not retried"
    assert refused.error.startswith("the judge answered HTTP 401")
    assert ok.ok and ok.score == 1.0 and ok.raw_answer == '{"score": 1}' and ok.attempts == 1

    port = free_port()  # nothing listens there
    gone = _judge(JudgeConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m", retries=2, retry_backoff_s=0))
    assert gone.score is None and gone.attempts == 3 and "unreachable" in gone.error
    assert gone.messages[1]["content"].startswith("## Task given to the agent\nWrite a.md.")
