"""Judgments (an LLM judge's scoring of a hybrid rollout's rubric), reward breakdowns and a task
outcome's verifier output and harness stderr: recorded beside the rollout and read back the same
through SqlStore (PostgreSQL and SQLite) and the gRPC StoreClient; bad input is refused in the
caller's protocol and writes nothing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from clawgym.config import StoreConfig
from clawgym.errors import AlreadyExists, InvalidArgument, NotFound
from clawgym.records import Judgment, RolloutSpec
from clawgym.store.bus_memory import MemoryBus
from clawgym.store.grpc_client import StoreClient
from clawgym.store.sql import SqlStore
from clawgym_services.store.server import create_server

BREAKDOWN = {"code": 0.5, "rubric": 1.0, "weights": {"code": 0.7, "rubric": 0.3}, "rubric_status": "judged"}


@pytest.fixture(params=["sql", "grpc"])
def either(request, store_url: str, free_port: int, rpc_secret: str) -> Iterator[SqlStore | StoreClient]:
    store = SqlStore(store_url, MemoryBus())
    if request.param == "sql":
        yield store
        store.close()
        return
    cfg = StoreConfig(url=store_url, port=free_port, metrics_port=0)
    server = create_server(cfg, host="127.0.0.1", store=store, secret=rpc_secret)
    server.start()
    with StoreClient(f"127.0.0.1:{free_port}", secret=rpc_secret, timeout_s=30) as client:
        yield client
    server.stop(grace=None)
    store.close()


def _judgment(rollout_id: str, **changes) -> Judgment:
    fields = dict(
        rollout_id=rollout_id,
        model="judge-1",
        base_url="http://127.0.0.1:1/v1",
        prompt=[{"role": "system", "content": "be fair"}, {"role": "user", "content": "score é \u2603"}],
        raw_answer='{"scores": {"Clarity": 1}}',
        score=1.0,
        rule_scores={"Clarity": 1.0},
        error="",
        latency_s=0.25,
        attempts=2,
        code_score=0.5,
    )
    return Judgment(**{**fields, **changes})


def test_a_judgment_and_a_breakdown_round_trip(either) -> None:
    run = either.create_run("judged")
    [a, b] = either.register_rollouts(run.id, [RolloutSpec("g", "t", "oracle"), RolloutSpec("g", "t", "oracle")])
    with pytest.raises(NotFound, match="no judgment"):
        either.get_judgment(a.rollout_id)
    judgment_id = either.record_judgment(_judgment(a.rollout_id))
    got = either.get_judgment(a.rollout_id)
    assert got.id == judgment_id and got.created_at > 0
    assert got == _judgment(a.rollout_id, id=judgment_id, created_at=got.created_at)
    with pytest.raises(AlreadyExists):
        either.record_judgment(_judgment(a.rollout_id))

    ended = either.finish_rollout(a.rollout_id, "finished", 0.65, False, "", {"judge_s": 0.3}, BREAKDOWN)
    assert ended.reward_breakdown == BREAKDOWN and either.get_rollout(a.rollout_id).reward_breakdown == BREAKDOWN
    ra = either.get_group("g").rollouts[0]
    assert ra.rollout.reward_breakdown == BREAKDOWN

    failed = _judgment(b.rollout_id, score=None, rule_scores={}, error="unparseable answer: no JSON", code_score=None)
    either.record_judgment(failed)
    got = either.get_judgment(b.rollout_id)
    assert got.score is None and got.code_score is None and got.error == "unparseable answer: no JSON"
    ended = either.finish_rollout(b.rollout_id, "failed", error="judge: ...")
    assert ended.reward_breakdown is None, "no breakdown is None, not {}"


def test_bad_judgments_are_refused_and_write_nothing(either) -> None:
    run = either.create_run("judged")
    [a] = either.register_rollouts(run.id, [RolloutSpec("g2", "t", "oracle")])
    with pytest.raises(NotFound):
        either.record_judgment(_judgment("nope"))
    for bad in (dict(score=1.5), dict(raw_answer="a\x00b"), dict(rule_scores={"x": "high"})):
        with pytest.raises(InvalidArgument):
            either.record_judgment(_judgment(a.rollout_id, **bad))
    with pytest.raises(NotFound):
        either.get_judgment(a.rollout_id)
    with pytest.raises(InvalidArgument):
        either.finish_rollout(a.rollout_id, "finished", 1.0, True, "", {}, {"rubric": float("nan")})
    assert either.get_rollout(a.rollout_id).status == "registered"


def test_a_rollouts_verifier_output_and_harness_stderr_round_trip(either) -> None:
    """Kept for a person reading a failed rollout: the same text back from every read of the rollout;
    a NUL (PostgreSQL text cannot hold it) is refused and the rollout stays unended."""
    run = either.create_run("outputs")
    [a, b] = either.register_rollouts(run.id, [RolloutSpec("g3", "t", "oracle")] * 2)
    verifier = "0/2 tests passed\nFAILED test_a.py::test_é - assert 1 == 2"
    stderr = "Traceback …\nKeyError: 'x' \u2603"
    ended = either.finish_rollout(
        a.rollout_id, "finished", 0.0, False, verifier_output=verifier, harness_stderr=stderr
    )
    assert (ended.verifier_output, ended.harness_stderr) == (verifier, stderr)
    group = either.get_group("g3")
    for got in (either.get_rollout(a.rollout_id), either.list_rollouts(run.id)[0], group.rollouts[0].rollout):
        assert (got.verifier_output, got.harness_stderr) == (verifier, stderr), got
    with pytest.raises(InvalidArgument, match="harness_stderr"):
        either.finish_rollout(b.rollout_id, "finished", 0.0, False, harness_stderr="a\x00b")
    assert either.get_rollout(b.rollout_id).status == "registered", "a refused end writes nothing"
    assert either.get_rollout(b.rollout_id).verifier_output == "", "not recorded yet"
