"""The orchestrator service over gRPC on loopback: statuses, rewards, limits, cancel, failures, metrics.

Every rollout runs for real: a bubblewrap sandbox per rollout, the oracle (the task's solution) or
nop pseudo-harness in it, the task's verifier after it, a PostgreSQL store recording it all.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import os
import threading
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

import pytest

from clawgym.assemble import open_rollouts
from clawgym.errors import FailedPrecondition, InvalidArgument, NotFound
from clawgym.orchestrator import failures
from clawgym.orchestrator.interface import Batch, RolloutRequest, RolloutStatus, collect
from clawgym.rpc import check_health
from clawgym.tasks.loader import load_tasks
from clawgym.tasks.suites import resolve_suite
from tests.orchestrator.conftest import write_clawgym_task

pytestmark = pytest.mark.slow

# Cancels wait this long after "running" so the harness process has started: a local exec cancelled
# within ~10 ms of its spawn waits for the whole command (asyncio 3.11 waits for the pipes, which the
# sandboxed command, already detached from bwrap, holds). That race is the local sandbox backend's
# (clawgym.sandbox.process.run_tree); what these tests check is the orchestrator's cancel.
SETTLE_S = 1.0


def mini_tasks(n: int) -> list[str]:
    """The first task of n families of the bundled mini suite's train split."""
    seen: dict[str, str] = {}
    for task in load_tasks(resolve_suite("mini"), split="train"):
        seen.setdefault(str(task.metadata.get("family", task.id)), task.id)
    return list(seen.values())[:n]


def sandboxes_in(root: Path) -> list[Path]:
    """The sandbox folders a local backend keeps under `root` (each holds a meta.json)."""
    return [p for p in root.iterdir() if (p / "meta.json").is_file()]


async def statuses_of(service, batch: Batch) -> list[RolloutStatus]:
    return [s async for s in service.run_rollouts(batch)]


def by_rollout(statuses: list[RolloutStatus]) -> dict[str, list[RolloutStatus]]:
    out: dict[str, list[RolloutStatus]] = defaultdict(list)
    for s in statuses:
        out[s.rollout_id].append(s)
    return out


@pytest.mark.parametrize("transport", ["grpc", "in-process"])
def test_oracle_is_rewarded_one_and_nop_zero_with_every_transition_streamed(make_orchestrator, transport):
    """Both RolloutService implementations stream registered → running → verifying → finished per
    rollout, and the store holds the verifier's reward: 1.0 for the oracle, 0.0 for nop."""
    served = make_orchestrator()
    run = served.store.create_run("orchestrator-test")
    tasks = mini_tasks(3)
    batch = Batch(run.id, [RolloutRequest(t, h, samples=2) for t in tasks for h in ("oracle", "nop")])
    if transport == "grpc":
        statuses = asyncio.run(statuses_of(served.client(), batch))
    else:
        statuses = served.call(statuses_of(served.orchestrator, batch))

    rollouts = by_rollout(statuses)
    assert len(rollouts) == 12, (
        f"3 tasks x 2 harnesses x 2 samples should be 12 rollouts, got {len(rollouts)}"
    )
    for rollout_id, seq in rollouts.items():
        states = [s.state for s in seq]
        assert states == ["registered", "running", "verifying", "finished"], (
            f"{rollout_id} ({seq[0].harness}) went through {states}, not the four transitions in order"
        )
        final = seq[-1]
        record = served.store.get_rollout(rollout_id)
        expected = 1.0 if final.harness == "oracle" else 0.0
        assert final.reward == record.reward == expected, (
            f"{final.harness} on {final.task_id}: streamed {final.reward}, stored {record.reward}, "
            f"expected {expected}\n{final.error}"
        )
        assert record.passed is (final.harness == "oracle"), "passed = reward >= the task's threshold"
        assert record.status == "finished" and record.sandbox, "the store records the end and the sandbox id"
        assert {"sandbox_start_s", "harness_s", "verify_s"} <= set(record.timings), (
            f"timings recorded: {record.timings}"
        )
    groups = {s.group_id for s in statuses}
    assert len(groups) == 6, "one group per (task, harness) request"
    for group_id in groups:
        group = served.store.get_group(group_id)
        assert len(group.rollouts) == 2, "each group holds its 2 samples"


def test_the_global_limit_caps_how_many_sandboxes_run_at_once(make_orchestrator, suite, beacon):
    """6 rollouts that each hold a loopback connection for 3 s, 3 at a time: the beacon (outside the
    orchestrator) sees at most 3 connections open at once, and 3 at some point."""
    served = make_orchestrator(max_concurrent_rollouts=3)
    run = served.store.create_run("limits")
    batch = Batch(run.id, [RolloutRequest("hold-beacon", "oracle", samples=6)], suite=str(suite))
    statuses = asyncio.run(statuses_of(served.client(), batch))
    finals = [s for s in statuses if s.ended]
    assert [s.reward for s in finals] == [1.0] * 6, f"every hold-beacon run passes: {finals}"
    assert beacon.total == 6, f"each of the 6 solutions connected once, saw {beacon.total}"
    assert beacon.peak == 3, f"at most (and at some point exactly) 3 at once, saw {beacon.peak}"


def test_a_rollout_reaches_the_proxy_but_not_the_hosts_postgresql(make_orchestrator, suite, pg_url):
    """issue #16: a rollout reached PostgreSQL (trust auth) on the host's loopback. The database is
    up (the pg_url fixture connected), the beacon stands for the proxy and is reached."""
    served = make_orchestrator()
    run = served.store.create_run("network")
    batch = Batch(
        run.id,
        [
            RolloutRequest("reach-postgres", "oracle", samples=1),
            RolloutRequest("hold-beacon", "oracle", samples=1),
        ],
        suite=str(suite),
    )
    finals = {s.task_id: s for s in asyncio.run(statuses_of(served.client(), batch)) if s.ended}
    assert finals["hold-beacon"].reward == 1.0, f"the proxy is reachable: {finals['hold-beacon']}"
    blocked = finals["reach-postgres"]
    assert blocked.reward == 0.0 and "Connection refused" in blocked.error, (
        f"PostgreSQL must not be: {blocked}"
    )


def test_a_per_harness_limit_caps_that_harness_while_others_run(make_orchestrator, suite, beacon):
    """oracle is capped at 2 (global 6): its beacon peak is 2, and nop rollouts still all finish."""
    served = make_orchestrator(max_concurrent_rollouts=6, harness_concurrency={"oracle": 2})
    run = served.store.create_run("harness-limits")
    batch = Batch(
        run.id,
        [RolloutRequest("hold-beacon", "oracle", samples=4), RolloutRequest("hold-beacon", "nop", samples=4)],
        suite=str(suite),
    )
    statuses = asyncio.run(statuses_of(served.client(), batch))
    finals = [s for s in statuses if s.ended]
    assert sorted((s.harness, s.reward) for s in finals) == [("nop", 0.0)] * 4 + [("oracle", 1.0)] * 4, finals
    assert beacon.total == 4, "only the oracle runs the solution that connects"
    assert beacon.peak == 2, f"oracle capped at 2 concurrent rollouts, beacon saw {beacon.peak}"


def test_cancelling_a_batch_destroys_its_sandboxes_and_marks_its_rollouts_cancelled(
    make_orchestrator, suite, sandbox_root
):
    """Three 2-minute rollouts are cancelled once running: Cancel reports 3, the stream ends with three
    `cancelled`, the store says cancelled with no reward, and no sandbox is left on disk."""
    served = make_orchestrator()
    run = served.store.create_run("cancel")
    batch = Batch(
        run.id, [RolloutRequest("sleep-long", "oracle", samples=3)], suite=str(suite), batch_id="b-cancel"
    )

    async def scenario():
        client = served.client()
        statuses, cancelled = [], None
        started = time.monotonic()
        async for status in client.run_rollouts(batch):
            statuses.append(status)
            if sum(s.state == "running" for s in statuses) == 3 and cancelled is None:
                await asyncio.sleep(SETTLE_S)
                cancelled = await client.cancel("b-cancel")
        return statuses, cancelled, time.monotonic() - started

    statuses, cancelled, took = asyncio.run(scenario())
    assert cancelled == 3, f"Cancel reports the 3 running rollouts, got {cancelled}"
    assert took < 60, f"the 120 s solutions were killed, not waited for ({took:.0f} s)"
    finals = [s for s in statuses if s.ended]
    assert [s.state for s in finals] == ["cancelled"] * 3, finals
    for s in finals:
        record = served.store.get_rollout(s.rollout_id)
        assert record.status == "cancelled" and record.reward is None, (
            f"stored as {record.status}/{record.reward}"
        )
    assert sandboxes_in(sandbox_root) == [], "cancelled rollouts leave no sandbox behind"


def test_cancelling_one_rollout_leaves_the_rest_of_its_batch_running(make_orchestrator, suite):
    """Cancel(batch, rollout) ends only that rollout; the other samples finish with their reward."""
    served = make_orchestrator()
    run = served.store.create_run("cancel-one")
    batch = Batch(
        run.id,
        [
            RolloutRequest("sleep-long", "oracle", samples=1),
            RolloutRequest("hold-beacon", "oracle", samples=2),
        ],
        suite=str(suite),
        batch_id="b-one",
    )

    async def scenario():
        client = served.client()
        statuses, cancelled = [], None
        async for status in client.run_rollouts(batch):
            statuses.append(status)
            if status.task_id == "sleep-long" and status.state == "running":
                await asyncio.sleep(SETTLE_S)
                cancelled = await client.cancel("b-one", status.rollout_id)
        return statuses, cancelled

    statuses, cancelled = asyncio.run(scenario())
    assert cancelled == 1, f"exactly the one rollout was cancelled, got {cancelled}"
    finals = {s.task_id + "/" + s.rollout_id: s for s in statuses if s.ended}
    states = sorted((s.task_id, s.state) for s in finals.values())
    assert states == [
        ("hold-beacon", "finished"),
        ("hold-beacon", "finished"),
        ("sleep-long", "cancelled"),
    ], states


def test_an_unreachable_proxy_is_retried_with_fresh_rollouts_and_never_rewarded(make_orchestrator, free_port):
    """The reference harness needs the proxy; with the proxy URL pointing at a closed port each attempt
    fails as `proxy`, is replaced by a fresh registration in the same group, and after max_attempts
    the slot ends failed. No registration gets a reward; the group completes with all three."""
    served = make_orchestrator(proxy_url=f"http://127.0.0.1:{free_port}", max_attempts=3, proxy_wait_s=1.5)
    run = served.store.create_run("proxy-down")
    task = mini_tasks(1)[0]
    statuses = asyncio.run(statuses_of(served.client(), Batch(run.id, [RolloutRequest(task, "reference")])))
    failed = [s for s in statuses if s.state == "failed"]
    assert [(s.failure, s.retrying, s.attempt) for s in failed] == [
        ("proxy", True, 1),
        ("proxy", True, 2),
        ("proxy", False, 3),
    ], f"three attempts, the first two retried: {[(s.failure, s.retrying, s.attempt) for s in failed]}"
    assert len({s.rollout_id for s in failed}) == 3, "each retry is a fresh rollout registration (new id)"
    assert not any(s.state in ("running", "verifying", "finished") for s in statuses), (
        "nothing ran in a sandbox when the proxy was down"
    )
    group = served.store.get_group(failed[0].group_id)
    assert [(r.rollout.status, r.rollout.reward, r.rollout.passed) for r in group.rollouts] == [
        ("failed", None, None)
    ] * 3, "all three registrations are in the group, failed and never rewarded"
    assert "unreachable" in group.rollouts[0].rollout.error, group.rollouts[0].rollout.error


class _HealthyButMute(http.server.BaseHTTPRequestHandler):
    """A proxy that is up (GET /healthz answers 200) but answers every model call with 503: the proxy
    in the seconds it restarts behind a load balancer, or with its store down."""

    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/healthz" else 404)
        self.end_headers()

    def do_POST(self) -> None:
        self.send_response(503)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"type": "error", "error": {"type": "overloaded_error", "message": "down"}}')

    def log_message(self, *args: object) -> None:
        pass


def test_a_failed_rollout_keeps_its_verifier_output_and_the_tail_of_the_harness_stderr(
    make_orchestrator, tmp_path
):
    """A task outcome that did not pass is read by a person (the browser): the store keeps what the
    verifier printed and the end of what the harness wrote to stderr, beside the reward 0."""
    reward = "#!/usr/bin/env bash\necho 'done.txt is missing' >&2\necho 0.0\n"
    noisy = 'for i in $(seq 1 3000); do echo "agent line $i" >&2; done\necho "agent gave up" >&2\nexit 3\n'
    write_clawgym_task(tmp_path / "suite", "give-up", "Write done.txt.", noisy, reward=reward)
    served = make_orchestrator()
    run = served.store.create_run("outputs")
    batch = Batch(run.id, [RolloutRequest("give-up", "oracle")], suite=str(tmp_path / "suite"))
    (final,) = [s for s in asyncio.run(statuses_of(served.client(), batch)) if s.ended]
    record = served.store.get_rollout(final.rollout_id)
    assert (record.status, record.reward, record.passed) == ("finished", 0.0, False), record
    assert "done.txt is missing" in record.verifier_output, f"verifier output: {record.verifier_output!r}"
    stderr = record.harness_stderr
    assert stderr.rstrip().endswith("agent gave up") and "agent line 3000" in stderr, stderr[-300:]
    assert "agent line 1\n" not in stderr and len(stderr) <= 4000, "a tail, not the whole stream"
    assert "agent gave up" in served.store.list_rollouts(run.id)[0].harness_stderr, "listed with the run"


def test_a_harness_that_never_reached_the_model_is_an_infra_failure_not_a_zero_reward(make_orchestrator):
    """The harness ran and the verifier would score the untouched task 0, but no call was recorded:
    the policy never acted, so the rollout fails as `proxy` and is retried, never rewarded."""
    mute = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HealthyButMute)
    threading.Thread(target=mute.serve_forever, daemon=True).start()
    try:
        served = make_orchestrator(proxy_url=f"http://127.0.0.1:{mute.server_address[1]}", max_attempts=2)
        run = served.store.create_run("proxy-mute")
        batch = Batch(run.id, [RolloutRequest(mini_tasks(1)[0], "reference")])
        statuses = asyncio.run(statuses_of(served.client(), batch))
    finally:
        mute.shutdown()
    ended = [s for s in statuses if s.ended]
    assert [(s.state, s.failure, s.retrying) for s in ended] == [
        ("failed", "proxy", True),
        ("failed", "proxy", False),
    ], [(s.state, s.failure, s.error) for s in ended]
    assert any(s.state == "running" for s in statuses), "the harness did run in its sandbox"
    group = served.store.get_group(ended[0].group_id)
    assert all(r.rollout.reward is None for r in group.rollouts), "no registration is rewarded"
    assert "without a model call" in group.rollouts[0].rollout.error


def test_an_attempt_waits_for_a_proxy_that_comes_up_late_instead_of_failing(make_orchestrator, free_port):
    """A proxy pod starting or being replaced: nothing listens for a few seconds. The attempt keeps
    asking (`proxy_wait_s`) and goes on once /healthz answers, spending no retry on it."""
    served = make_orchestrator(proxy_url=f"http://127.0.0.1:{free_port}", max_attempts=1, proxy_wait_s=30)
    run = served.store.create_run("proxy-late")
    batch = Batch(run.id, [RolloutRequest(mini_tasks(1)[0], "reference")])
    late = http.server.ThreadingHTTPServer(("127.0.0.1", free_port), _HealthyButMute, bind_and_activate=False)

    def come_up() -> None:
        time.sleep(3)
        late.server_bind()
        late.server_activate()
        late.serve_forever()

    threading.Thread(target=come_up, daemon=True).start()
    try:
        statuses = asyncio.run(statuses_of(served.client(), batch))
    finally:
        late.shutdown()
    assert any(s.state == "running" for s in statuses), (
        f"the first attempt reached its sandbox once the proxy answered: {[(s.state, s.error) for s in statuses]}"
    )
    assert "unreachable" not in (statuses[-1].error or ""), statuses[-1].error


def test_a_sandbox_that_cannot_be_created_is_retried_and_only_the_fresh_rollout_is_rewarded(
    make_orchestrator, suite, sandbox_root
):
    """A real bad config: one sandbox uid (`uid_count: 1`) for two concurrent rollouts. The second
    sandbox cannot be created (SandboxFailed), so its rollout fails as `sandbox` and a fresh one in
    the same group runs once the uid is free. Final: both slots rewarded 1.0, the failed
    registration stays unrewarded in the store."""
    if os.geteuid() != 0:
        pytest.skip("sandbox uids are allocated only when the orchestrator runs as root")
    sandbox = {
        "owner": "uid-test",
        "local": {"root_dir": str(sandbox_root), "isolation": "bwrap", "uid_count": 1},
    }
    served = make_orchestrator(
        sandbox=sandbox, max_concurrent_rollouts=2, max_attempts=5, retry_backoff_s=0.5
    )
    run = served.store.create_run("sandbox-failure")
    batch = Batch(run.id, [RolloutRequest("hold-beacon", "oracle", samples=2)], suite=str(suite))
    statuses = asyncio.run(statuses_of(served.client(), batch))
    failed = [s for s in statuses if s.state == "failed"]
    finished = [s for s in statuses if s.state == "finished"]
    assert failed and all(s.failure == "sandbox" and s.retrying for s in failed), (
        f"the second sandbox could not be created and was retried: {[(s.failure, s.error) for s in failed]}"
    )
    assert [s.reward for s in finished] == [1.0, 1.0], "both slots end rewarded on a fresh registration"
    for s in failed:
        record = served.store.get_rollout(s.rollout_id)
        assert (record.status, record.reward, record.passed) == ("failed", None, None), "never rewarded"
    group = served.store.get_group(failed[0].group_id)
    assert len(group.rollouts) == 2 + len(failed), "the retries joined the same group"


def test_a_harness_that_is_not_installed_fails_as_install_and_is_never_rewarded(make_orchestrator, tmp_path):
    """install_harnesses off and an empty harness cache: mini-swe-agent cannot start; after its
    attempts the rollout ends failed with kind `install`, no reward."""
    served = make_orchestrator(
        install_harnesses=False, harness_cache_dir=str(tmp_path / "empty"), max_attempts=2
    )
    run = served.store.create_run("not-installed")
    task = mini_tasks(1)[0]
    statuses = asyncio.run(
        statuses_of(served.client(), Batch(run.id, [RolloutRequest(task, "mini-swe-agent")]))
    )
    failed = [s for s in statuses if s.state == "failed"]
    assert [(s.failure, s.retrying) for s in failed] == [("install", True), ("install", False)], failed
    assert all(served.store.get_rollout(s.rollout_id).reward is None for s in failed), "never rewarded"


def test_bad_batches_are_refused_with_typed_errors_before_anything_is_registered(make_orchestrator, suite):
    """Unknown task or harness → NOT_FOUND; an oracle on a task without a solution → FAILED_PRECONDITION;
    zero samples → INVALID_ARGUMENT. The run has no rollouts afterwards."""
    served = make_orchestrator()
    run = served.store.create_run("bad")
    client = served.client()
    task = mini_tasks(1)[0]
    cases = [
        (Batch(run.id, [RolloutRequest("no-such-task", "nop")]), NotFound),
        (Batch(run.id, [RolloutRequest(task, "no-such-harness")]), NotFound),
        (Batch("no-such-run", [RolloutRequest(task, "nop")]), NotFound),
    ]
    for batch, error in cases:
        with pytest.raises(error):
            asyncio.run(statuses_of(client, batch))
    write = suite / "no-solution"
    (write / "reward").mkdir(parents=True)
    (write / "data_entry.json").write_text('{"id": "no-solution", "user_query": "x"}')
    (write / "reward" / "reward.sh").write_text("echo 0.0\n")
    with pytest.raises(FailedPrecondition, match="no solution"):
        asyncio.run(
            statuses_of(client, Batch(run.id, [RolloutRequest("no-solution", "oracle")], suite=str(suite)))
        )
    with pytest.raises(InvalidArgument):
        served.call(statuses_of(served.orchestrator, Batch(run.id, [RolloutRequest(task, "nop", samples=0)])))


def test_metrics_endpoint_exports_what_the_dashboards_query(make_orchestrator, free_port):
    """/metrics on the metrics port: rollouts by harness and status, sandbox start latency, durations."""
    served = make_orchestrator(metrics_port=free_port)
    run = served.store.create_run("metrics")
    task = mini_tasks(1)[0]
    asyncio.run(statuses_of(served.client(), Batch(run.id, [RolloutRequest(task, "oracle", samples=2)])))
    text = urllib.request.urlopen(f"http://127.0.0.1:{free_port}/metrics", timeout=10).read().decode()
    for needle in (
        'clawgym_orchestrator_rollouts_total{harness="oracle",status="finished"} 2.0',
        'clawgym_orchestrator_sandbox_start_seconds_count{backend="local"} 2.0',
        'clawgym_orchestrator_rollout_duration_seconds_count{harness="oracle"} 2.0',
        'clawgym_orchestrator_active_sandboxes{backend="local",harness="oracle"} 0.0',
        # a run without infrastructure failures charts each kind at 0 rather than "No data"
        *(f'clawgym_orchestrator_failures_total{{kind="{kind}"}} 0.0' for kind in failures.KINDS),
    ):
        assert needle in text, f"/metrics lacks {needle!r}"
    assert check_health(served.target, "clawgym.v1.Orchestrator") == "SERVING"


def test_a_caller_that_stops_listening_cancels_its_batch(make_orchestrator, suite, sandbox_root):
    """Leaving the RunRollouts stream (the client went away) cancels the batch: the running rollout
    ends cancelled in the store and its sandbox is destroyed, well before its 120 s solution ends."""
    served = make_orchestrator()
    run = served.store.create_run("disconnect")
    batch = Batch(run.id, [RolloutRequest("sleep-long", "oracle")], suite=str(suite))

    async def leave_once_running() -> str:
        client = served.client()
        try:
            async with contextlib.aclosing(client.run_rollouts(batch)) as statuses:
                async for status in statuses:
                    if status.state == "running":
                        await asyncio.sleep(SETTLE_S)
                        return status.rollout_id  # leaving closes the stream: the call is cancelled
        finally:
            await client.close()
        raise AssertionError("the rollout never started")

    rollout_id = asyncio.run(leave_once_running())
    deadline = time.monotonic() + 60
    while served.store.get_rollout(rollout_id).status != "cancelled":
        assert time.monotonic() < deadline, f"still {served.store.get_rollout(rollout_id).status} after 60 s"
        time.sleep(0.2)
    assert served.store.get_rollout(rollout_id).reward is None, "a cancelled rollout is not rewarded"
    deadline = time.monotonic() + 30
    while sandboxes_in(sandbox_root):
        assert time.monotonic() < deadline, "the cancelled rollout's sandbox was not destroyed"
        time.sleep(0.2)


def test_the_config_picks_the_grpc_client_or_an_in_process_orchestrator(
    make_orchestrator, pg_url, sandbox_root
):
    """open_rollouts (the composition root): orchestrator.grpc_url set → the service's client; empty → in-process.
    Both run the same batch to the same rewards."""
    served = make_orchestrator()
    run = served.store.create_run("factory")
    task = mini_tasks(1)[0]
    batch = Batch(run.id, [RolloutRequest(task, "oracle"), RolloutRequest(task, "nop")])

    async def through(cfg) -> list[tuple[str, float | None]]:
        service = await open_rollouts(cfg, served.store)
        try:
            return sorted((s.harness, s.reward) for s in await collect(service, batch))
        finally:
            await service.close()

    remote = served.cfg.model_copy(
        update={"orchestrator": served.cfg.orchestrator.model_copy(update={"grpc_url": served.target})}
    )
    assert asyncio.run(through(remote)) == [("nop", 0.0), ("oracle", 1.0)], "over gRPC"
    assert asyncio.run(through(served.cfg)) == [("nop", 0.0), ("oracle", 1.0)], "in-process"
