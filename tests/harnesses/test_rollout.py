"""One harness on one task in a real local sandbox: workspace in, harness run, verifier, reward."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from clawgym.harnesses.registry import get_harness
from clawgym.orchestrator.attempt import run_task
from clawgym.orchestrator.failures import InfraFailure
from clawgym.tasks.loader import load_task

DATA = Path(__file__).parents[1] / "tasks" / "data"


def test_reference_harness_solves_a_clawgym_task_through_a_chat_server(chat_server, backend):
    """The agent runs inside the sandbox, reaches the server on loopback, acts in the mounted workspace."""
    task = load_task(DATA / "clawgym" / "write-greeting")
    chat_server.replies = ['```bash\necho "Hello, $(cat name.txt)!" > greeting.txt\n```', "DONE"]
    outcome = asyncio.run(
        run_task(
            get_harness("reference"), task, backend, proxy_url=chat_server.url, token="tok-9", model="policy"
        )
    )
    assert outcome.verdict.reward == 1.0 and outcome.verdict.passed, (
        f"verifier: {outcome.verdict.detail}\n{outcome.harness_output}"
    )
    assert outcome.harness_exit_code == 0, outcome.harness_output
    assert len(chat_server.requests) == 2, "one acting call and one that ends the run"
    assert chat_server.headers[0]["authorization"] == "Bearer tok-9", "the rollout token identifies the run"
    assert "exit code 0" in chat_server.requests[1]["messages"][-1]["content"], (
        "the command ran in the sandbox"
    )


def test_a_wrong_answer_gets_the_verifiers_partial_reward_not_an_error(chat_server, backend):
    """The harness finishing with the wrong file is a task failure: reward from the verifier, passed False."""
    task = load_task(DATA / "clawgym" / "write-greeting")
    chat_server.replies = ["```bash\necho hi > greeting.txt\n```", "DONE"]
    outcome = asyncio.run(
        run_task(get_harness("reference"), task, backend, proxy_url=chat_server.url, token="t", model="m")
    )
    assert outcome.verdict.reward == 0.5 and not outcome.verdict.passed, (
        "reward.sh gives 0.5 for a wrong greeting"
    )


def test_a_harness_whose_model_calls_fail_still_gets_verified(backend, chat_server):
    """A harness that exits on a model error (the proxy is up, its calls fail) is not an
    infrastructure failure: the verifier decides (reward 0)."""
    task = load_task(DATA / "clawgym" / "make-notes-dir")
    outcome = asyncio.run(
        run_task(
            get_harness("reference"), task, backend, proxy_url=chat_server.url + "/broken", token="t", model="m"
        )
    )
    assert outcome.harness_exit_code == 3, (
        f"the agent reports a model error with exit 3: {outcome.harness_output}"
    )
    assert outcome.verdict.reward == 0.0 and not outcome.verdict.passed


def test_an_unreachable_proxy_is_an_infrastructure_failure_not_a_reward(backend):
    """No proxy at all: the attempt fails before the harness starts (the orchestrator retries it)."""
    task = load_task(DATA / "clawgym" / "make-notes-dir")
    with pytest.raises(InfraFailure, match="proxy"):
        asyncio.run(
            run_task(get_harness("reference"), task, backend, proxy_url="http://127.0.0.1:9", token="t")
        )
