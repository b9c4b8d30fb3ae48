"""The rollout browser's JSON reads and page files (`clawgym.browse.app`), on a captured run
in each backend, read in process and through the store service."""

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from clawgym.browse.app import create_browse_app
from clawgym.config import StoreConfig
from clawgym.records import Checkpoint
from clawgym.store.bus_memory import MemoryBus
from clawgym.store.grpc_client import StoreClient
from clawgym.store.sql import SqlStore
from clawgym_app.runtime.services import free_port
from clawgym_services.store.server import create_server
from tests.export.capture import (
    HARNESS_STDERR,
    HOSTILE,
    VERIFIER_OUTPUT,
    CapturedRun,
    capture_run,
    record_evaluations,
)


@pytest.fixture(params=["sql", "grpc"])
def browsed(request, store_url: str, rpc_secret: str) -> Iterator[tuple[TestClient, CapturedRun]]:
    """The browser app over a captured run (plus a checkpoint that trained its group, a step, and two
    evaluations of it recorded as the evaluation runner and `clawgym eval` record them)."""
    store = SqlStore(store_url, MemoryBus())
    run = capture_run(store)
    store.record_checkpoint(Checkpoint(run.run_id, 1, 0, "file:///c/1", {}, group_ids=(run.group_id,)))
    store.record_train_step(run.run_id, 0, {"loss": 0.5, "version": 1, "trained_groups": [run.group_id],
                                            "reward": 0.5, "harness/test-harness/reward": 0.5})  # fmt: skip
    record_evaluations(store, run.run_id)
    if request.param == "sql":
        yield TestClient(create_browse_app(store), base_url="http://127.0.0.1"), run
    else:
        port = request.getfixturevalue("free_port")
        server = create_server(StoreConfig(url=store_url, port=port, metrics_port=0), host="127.0.0.1",
                               store=store, secret=rpc_secret)  # fmt: skip
        server.start()
        with StoreClient(f"127.0.0.1:{port}", secret=rpc_secret) as client:
            yield TestClient(create_browse_app(client), base_url="http://127.0.0.1"), run
        server.stop(grace=None)
    store.close()


def test_the_reads_list_runs_then_groups_with_rewards_then_a_rollouts_tree(browsed) -> None:
    http, run = browsed
    runs = http.get("/api/runs").json()["runs"]
    assert [r["id"] for r in runs if r["config"]["kind"] != "eval"] == [run.run_id]
    page = http.get(f"/api/runs/{run.run_id}").json()
    assert [s["step"] for s in page["steps"]] == [0] and page["checkpoints"][0]["groups"] == 1
    (group,) = page["groups"]
    assert (group["id"], group["size"], group["consumed_by_step"]) == (run.group_id, 2, 0), group
    assert [(r["id"], r["reward"], r["status"]) for r in group["rollouts"]] == [
        (run.rollout_ids[0], 1.0, "finished"), (run.rollout_ids[1], 0.0, "finished"),
    ]  # fmt: skip
    tree = http.get(f"/api/rollouts/{run.rollout_ids[1]}").json()["tree"]
    assert len(tree["nodes"]) == 3 and tree["stats"]["branch_points"] == 1, "the compacted rollout branches"
    assert tree["calls"][0]["request"]["messages"][0]["content"].endswith(HOSTILE), "the raw request is data"
    assert "text" not in tree["nodes"][0], "without a tokenizer the page gets token ids only"


def test_a_run_shows_its_steps_as_columns_and_the_evaluation_runs_of_it(browsed) -> None:
    http, run = browsed
    page = http.get(f"/api/runs/{run.run_id}").json()
    assert page["step_columns"] == ["loss", "reward", "harness/test-harness/reward"], (
        "one column per scalar metric in recorded order; the step's version and group lists are not columns"
    )
    evaluations = page["evaluations"]
    assert [(e["version"], e["suite"], e["pass_at_1"]) for e in evaluations] == [
        (0, "mini", {"reference": 0.25}), (1, "mini", {"reference": 0.75}),
    ], "both evaluation runs, oldest first, each with the Pass@1 recorded for it"  # fmt: skip
    runs = http.get("/api/runs").json()["runs"]
    of_run = {r["id"]: r["of_run"] for r in runs}
    assert [of_run[e["id"]] for e in evaluations] == [run.run_id] * 2, "each names the run it evaluated"
    assert sorted(of_run.values(), key=str) == sorted([None, None, run.run_id, run.run_id], key=str)
    assert http.get(f"/api/runs/{evaluations[1]['id']}").json()["evaluations"] == [], "an eval run has none"


def test_a_failed_rollout_shows_its_verifier_output_and_harness_stderr(browsed) -> None:
    http, run = browsed
    failed = http.get(f"/api/rollouts/{run.rollout_ids[1]}").json()["rollout"]
    assert (failed["passed"], failed["verifier_output"], failed["harness_stderr"]) == (
        False, VERIFIER_OUTPUT, HARNESS_STDERR,
    ), "the rollout page carries both tails as the store keeps them"  # fmt: skip
    (group,) = http.get(f"/api/runs/{run.run_id}").json()["groups"]
    assert [r["verifier"] for r in group["rollouts"]] == ["", "0/1 tests passed"], "the run lists the verdict line"


def test_unknown_ids_and_files_are_404_with_a_reason_and_pages_carry_a_strict_csp(browsed) -> None:
    http, _ = browsed
    missing = http.get("/api/rollouts/nope")
    assert missing.status_code == 404 and "unknown rollout" in missing.json()["detail"]
    assert http.get("/api/runs/nope").status_code == 404
    assert http.get("/static/../pages.py").status_code == 404 and http.get("/static/x.js").status_code == 404
    index = http.get("/")
    assert index.status_code == 200 and index.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in index.headers["content-security-policy"], "no inline script may run"
    assert http.get("/static/browse.js").headers["content-type"].startswith("text/javascript")


def test_the_store_service_serves_the_browser_beside_grpc_only_when_asked(store_url: str, rpc_secret: str) -> None:
    """store.browse_port: the page and its reads over real HTTP, next to the gRPC port; 0 keeps it off."""

    import httpx

    browse_port = free_port()
    plain = SqlStore(store_url, MemoryBus())
    off = create_server(StoreConfig(url=store_url, port=0, metrics_port=0), host="127.0.0.1", store=plain,
                        secret=rpc_secret)  # fmt: skip
    assert off.browse is None and off.browse_port == 0, "without browse_port the store service serves no page"
    plain.close()
    cfg = StoreConfig(url=store_url, port=0, metrics_port=0, browse_port=browse_port)
    server = create_server(cfg, host="127.0.0.1", secret=rpc_secret)
    port = server.start()
    try:
        assert server.browse_port == browse_port
        with StoreClient(f"127.0.0.1:{port}", secret=rpc_secret) as client:
            run = capture_run(client)  # captured through the proxy into the store service
        runs = httpx.get(f"http://127.0.0.1:{browse_port}/api/runs", timeout=30).json()["runs"]
        assert [r["id"] for r in runs] == [run.run_id], "the browser reads the service's own store"
        tree = httpx.get(f"http://127.0.0.1:{browse_port}/api/rollouts/{run.rollout_ids[0]}", timeout=30).json()
        assert len(tree["tree"]["calls"]) == 2
        assert "clawgym rollouts" in httpx.get(f"http://127.0.0.1:{browse_port}/", timeout=30).text
    finally:
        server.stop(grace=None)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{browse_port}/api/runs", timeout=5)
