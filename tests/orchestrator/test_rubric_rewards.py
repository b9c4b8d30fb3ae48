"""Rubric rewards (issue #19): a hybrid ClawGym task scored 0.7 x code + 0.3 x rubric, the rubric by an
LLM judge served by the project's own inference service (the proxy over an engine).

- The judge is the real proxy app over a scripted engine that answers a known score: the rollout's
  reward is exactly 0.7 x code + 0.3 x rubric, and the judge's prompt, raw answer and score are
  recorded beside the rollout, read back through SqlStore and the gRPC StoreClient. The proxy
  recorded the judge's request as a call of the judge's own session (its `clawgym session` key).
- The judge is the proxy over the real tiny-qwen3 torch engine (random weights): its answer is
  garbage, recorded as such, and the rollout fails with kind `judge` (no reward, not retried)
  instead of getting a made-up score.
- Without a judge configured, the same task is scored by its code checks alone and says so.
"""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from clawgym.config import StoreConfig
from clawgym.inference.scripted import ScriptedEngine
from clawgym.inference.torch_engine import TorchEngine
from clawgym.orchestrator.interface import Batch, RolloutRequest, collect
from clawgym.policies import load_model, load_tokenizer
from clawgym.proxy.app import create_app
from clawgym.proxy.config import ProxyConfig
from clawgym.proxy.serving import ServerThread
from clawgym.records import RolloutSpec
from clawgym.store.bus_memory import MemoryBus
from clawgym.store.grpc_client import StoreClient
from clawgym.store.sql import SqlStore
from clawgym_services.store.server import create_server

FIXTURE = Path(__file__).parents[1] / "judge" / "data" / "hybrid-summary"
SCRIPTED_ANSWER = (
    "<think>The summary lists both action items.</think>\n"
    '```json\n{"scores": {"Summary usefulness": 0.75}, "reason": "accurate, a little terse"}\n```'
)


@pytest.fixture
def hybrid_suite(tmp_path: Path) -> Path:
    root = tmp_path / "hybrid-suite"
    shutil.copytree(FIXTURE, root / FIXTURE.name)
    return root


class JudgeProxy:
    """The project's proxy as an OpenAI-compatible judge: its own store, one session for the judge."""

    def __init__(self, store_path: Path, engine) -> None:
        self.store = SqlStore(f"sqlite:///{store_path}")
        run = self.store.create_run("judge")
        [self.session] = self.store.register_rollouts(
            run.id, [RolloutSpec(group_id="judge", task_id="judging", harness="judge")]
        )
        self.engine = engine
        self.server = ServerThread(create_app(ProxyConfig(), engine, self.store, load_tokenizer("tiny-qwen3")))
        self.url = self.server.start()

    def settings(self, key_env: str, **extra) -> dict:
        return {"base_url": f"{self.url}/v1", "model": "tiny-qwen3", "api_key_env": key_env, **extra}

    def close(self) -> None:
        self.server.stop()
        self.store.close()


@pytest.fixture
def judge_proxy(tmp_path: Path) -> Iterator:
    made: list[JudgeProxy] = []

    def make(engine) -> JudgeProxy:
        made.append(JudgeProxy(tmp_path / f"judge-{len(made)}.db", engine))
        return made[-1]

    yield make
    for proxy in made:
        proxy.close()
        if isinstance(proxy.engine, TorchEngine):
            asyncio.run(proxy.engine.aclose())


@pytest.fixture
def key_env(monkeypatch) -> str:
    return f"CLAWGYM_TEST_JUDGE_KEY_{uuid.uuid4().hex[:8].upper()}"


def _run(served, suite: Path, harness: str = "oracle"):
    run = served.store.create_run("hybrid")
    batch = Batch(run.id, [RolloutRequest("hybrid-summary", harness, samples=1)], suite=str(suite))
    return asyncio.run(collect(served.client(), batch))


def test_a_hybrid_task_is_scored_by_a_judge_served_by_the_proxy(
    make_orchestrator, hybrid_suite, judge_proxy, key_env, monkeypatch, pg_url, free_port, rpc_secret
):
    tok = load_tokenizer("tiny-qwen3")
    proxy = judge_proxy(ScriptedEngine.from_texts(tok, [SCRIPTED_ANSWER], max_context=16384))
    monkeypatch.setenv(key_env, proxy.session.token)
    served = make_orchestrator(judge=proxy.settings(key_env, max_tokens=256))

    [final] = _run(served, hybrid_suite)

    assert final.state == "finished", final.error
    assert final.reward == pytest.approx(0.7 * 1.0 + 0.3 * 0.75), "0.7 x code (1.0) + 0.3 x rubric (0.75)"
    assert final.breakdown == {
        "code": 1.0,
        "rubric": 0.75,
        "weights": {"code": 0.7, "rubric": 0.3},
        "rule_scores": {"Summary usefulness": 0.75},
        "judge_model": "tiny-qwen3",
        "rubric_status": "judged",
    }, "the streamed status says which part came from where"
    assert final.passed is False, "0.925 is below the task's threshold (1.0)"

    rollout = served.store.get_rollout(final.rollout_id)
    assert rollout.reward == final.reward and rollout.reward_breakdown == final.breakdown
    judgment = served.store.get_judgment(final.rollout_id)
    assert judgment.score == 0.75 and judgment.rule_scores == {"Summary usefulness": 0.75}
    assert judgment.code_score == 1.0 and judgment.error == "" and judgment.attempts == 1
    # the proxy answers the <think> part as reasoning; the answer's content is recorded as it came
    assert judgment.raw_answer == SCRIPTED_ANSWER.split("</think>\n")[1]
    assert judgment.model == "tiny-qwen3" and judgment.base_url == f"{proxy.url}/v1"
    user = judgment.prompt[-1]["content"]
    assert "Read input/notes.txt" in user, "the task's instruction is in the prompt"
    assert "Summary usefulness" in user and "0.75: Covers every action item" in user, "the rubric too"
    assert "- book the room for Friday\n- send the agenda to all volunteers" in user, "and the judged file"
    assert judgment.latency_s > 0

    # the judge's request went through the proxy, recorded as a call of the judge's own session
    [call] = proxy.store.list_calls(proxy.session.rollout_id)
    assert call.protocol == "openai_chat"
    assert call.response["choices"][0]["message"]["content"] == judgment.raw_answer
    assert call.request["messages"] == judgment.prompt and call.request["temperature"] == 0.0

    # the same records through the store service's gRPC client
    store = SqlStore(pg_url, MemoryBus())
    server = create_server(
        StoreConfig(url=pg_url, port=free_port, metrics_port=0), host="127.0.0.1", store=store, secret=rpc_secret
    )
    server.start()
    try:
        with StoreClient(f"127.0.0.1:{free_port}", secret=rpc_secret, timeout_s=30) as client:
            assert client.get_judgment(final.rollout_id) == judgment
            assert client.get_rollout(final.rollout_id).reward_breakdown == final.breakdown
    finally:
        server.stop(grace=None)
        store.close()


def test_a_judge_whose_answer_cannot_be_parsed_fails_the_rollout_with_its_answer_recorded(
    make_orchestrator, hybrid_suite, judge_proxy, key_env, monkeypatch
):
    """tiny-qwen3's random weights answer noise: recorded, and a `judge` failure (no reward, no retry)."""
    proxy = judge_proxy(TorchEngine(load_model("tiny-qwen3"), name="tiny-qwen3"))
    monkeypatch.setenv(key_env, proxy.session.token)
    served = make_orchestrator(judge=proxy.settings(key_env, max_tokens=24, retries=0), max_attempts=3)

    [final] = _run(served, hybrid_suite)

    assert final.state == "failed" and final.failure == "judge", final
    assert final.reward is None and not final.retrying, "no made-up score, and the harness is not rerun"
    assert "unparseable answer" in final.error and "code checks: reward 1.0000" in final.error
    rollout = served.store.get_rollout(final.rollout_id)
    assert rollout.status == "failed" and rollout.reward is None and rollout.reward_breakdown is None
    judgment = served.store.get_judgment(final.rollout_id)
    assert judgment.score is None and judgment.error.startswith("unparseable answer: ")
    assert judgment.code_score == 1.0, "what the code checks gave is kept"
    [call] = proxy.store.list_calls(proxy.session.rollout_id)
    answered = call.response["choices"][0]["message"].get("content") or ""
    assert judgment.raw_answer == answered.replace("\x00", "\ufffd"), "the judge's noise is recorded as it came"
    assert len(call.output_ids) > 0, "the tiny model did generate an answer"
    assert len(served.store.get_group(rollout.group_id).rollouts) == 1, "not retried"


def test_a_judge_answering_a_score_no_float_holds_fails_the_rollout_with_its_judgment_recorded(
    make_orchestrator, hybrid_suite, judge_proxy, key_env, monkeypatch
):
    """A 400-digit score is an answer like any other that is no verdict: the rollout fails with kind
    `judge` and its judgment is recorded with the error, instead of an exception losing both."""
    answer = '{"scores": {"Summary usefulness": 1' + "0" * 400 + "}}"
    proxy = judge_proxy(ScriptedEngine.from_texts(load_tokenizer("tiny-qwen3"), [answer], max_context=16384))
    monkeypatch.setenv(key_env, proxy.session.token)
    served = make_orchestrator(judge=proxy.settings(key_env, retries=0))

    [final] = _run(served, hybrid_suite)

    assert final.state == "failed" and final.failure == "judge", final
    judgment = served.store.get_judgment(final.rollout_id)
    assert judgment.score is None and judgment.raw_answer == answer, "the answer is recorded as it came"
    assert judgment.error.startswith("unparseable answer: ") and "outside [0, 1]" in judgment.error
    assert judgment.code_score == 1.0, "what the code checks gave is kept"


def test_without_a_judge_a_hybrid_task_is_scored_by_its_code_checks_alone(make_orchestrator, hybrid_suite):
    served = make_orchestrator()
    [oracle] = _run(served, hybrid_suite, "oracle")
    assert oracle.state == "finished" and oracle.reward == 1.0 and oracle.passed
    assert oracle.breakdown == {
        "code": 1.0,
        "rubric": None,
        "weights": {"code": 1.0, "rubric": 0.0},
        "rubric_status": "not_judged: no judge configured",
    }
    with pytest.raises(Exception, match="no judgment"):
        served.store.get_judgment(oracle.rollout_id)
