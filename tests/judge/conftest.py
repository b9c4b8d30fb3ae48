"""A real judge endpoint for judge tests: the project's proxy on a loopback port over a scripted
engine that answers given texts, with the prompts it received read back from its store."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from clawgym.inference.scripted import ScriptedEngine
from clawgym.judge.config import JudgeConfig
from clawgym.policies import load_tokenizer
from clawgym.proxy.app import create_app
from clawgym.proxy.config import ProxyConfig
from clawgym.proxy.serving import ServerThread
from clawgym.records import RolloutSpec
from clawgym.store.sql import SqlStore


class JudgeEndpoint:
    """An OpenAI-compatible judge at `base_url`; call i answers answers[i] (the last repeating)."""

    def __init__(self, store_path: Path, answers: list[str], key_env: str) -> None:
        tok = load_tokenizer("tiny-qwen3")
        self.store = SqlStore(f"sqlite:///{store_path}")
        run = self.store.create_run("judge")
        [self.session] = self.store.register_rollouts(run.id, [RolloutSpec("judge", "judging", "judge")])
        engine = ScriptedEngine.from_texts(tok, answers, max_context=32768)
        self.server = ServerThread(create_app(ProxyConfig(), engine, self.store, tok))
        self.base_url = f"{self.server.start()}/v1"
        self.key_env = key_env

    def cfg(self, **extra: Any) -> JudgeConfig:
        return JudgeConfig(base_url=self.base_url, model="judge", api_key_env=self.key_env, **extra)

    def prompts(self) -> list[list[dict[str, Any]]]:
        """The messages of every request the endpoint received, in order."""
        calls = sorted(self.store.list_calls(self.session.rollout_id), key=lambda c: c.seq)
        return [call.request["messages"] for call in calls]

    def close(self) -> None:
        self.server.stop()
        self.store.close()


@pytest.fixture
def judge_endpoint(tmp_path: Path, monkeypatch) -> Iterator[Callable[[list[str]], JudgeEndpoint]]:
    made: list[JudgeEndpoint] = []

    def make(answers: list[str]) -> JudgeEndpoint:
        key_env = f"CLAWGYM_TEST_JUDGE_KEY_{len(made)}"
        endpoint = JudgeEndpoint(tmp_path / f"judge-{len(made)}.db", answers, key_env)
        monkeypatch.setenv(key_env, endpoint.session.token)
        made.append(endpoint)
        return endpoint

    yield make
    for endpoint in made:
        endpoint.close()
