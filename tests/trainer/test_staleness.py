"""Rollouts that span policy versions: async steps train the complete groups, whatever versions
served them, within `max_policy_lag` counted from each group's oldest generated token (not the
version it was requested under); in-flight groups carry over; only groups past the bound drop.

Everything is real on CPU: tiny-qwen3 in the torch engine generates the toy rollouts (a rollout's
calls are paced by a hook so that publishes happen between them), SQLite store, the trainer loop.
"""

import asyncio
import itertools
import threading
import time

import numpy as np
import pytest
from prometheus_client import generate_latest

from clawgym.orchestrator.interface import Batch, RolloutRequest
from clawgym.records import Call, RolloutSpec
from clawgym.store.bus_memory import MemoryBus
from clawgym.store.sql import SqlStore
from clawgym.trainer import loop as loop_module
from clawgym.trainer.batch import oldest_version
from clawgym.trainer.toy import ToyRolloutSource


@pytest.fixture
def store(sqlite_url: str):
    s = SqlStore(sqlite_url, MemoryBus())
    yield s
    s.close()


def _consumed(store, run_id: str) -> list[tuple[str, ...]]:
    return [c.group_ids for c in store.list_checkpoints(run_id)]


def _assert_each_group_consumed_once(consumed: list[tuple[str, ...]]) -> None:
    for a, b in itertools.combinations(consumed, 2):
        assert not set(a) & set(b), f"a group was consumed by two checkpoints: {consumed}"


class HoldsVersion2:
    """The trainer's view of the engine: publishing version 2 waits for `released`, so that the calls
    made under version 1 are served by it alone."""

    def __init__(self, engine, released: asyncio.Event) -> None:
        self.engine, self.released = engine, released

    async def load_weights(self, version: int, uri: str):
        if version == 2:
            await self.released.wait()
        return await self.engine.load_weights(version, uri)

    def __getattr__(self, name: str):
        return getattr(self.engine, name)


def test_a_group_served_by_three_versions_is_trained_once_with_each_calls_version(
    store, trainer_cfg, make_trainer, engine, monkeypatch
):
    """One group's rollouts make call k only once the engine serves version k: its calls are served
    by versions 0, 1 and 2, across two checkpoint publishes. Steps 1 and 2 do not wait for it (other
    groups complete first); step 3 (version 2, its last within max_policy_lag 2) waits for it and
    trains it, once, with each token's recorded version in the loss rows."""
    slow: list[str] = []
    second_calls_made = asyncio.Event()  # all 3 slow rollouts made call 1: version 2 may be published
    third_calls = []

    async def pace(group_id: str, seq: int) -> None:
        if not slow:
            slow.append(group_id)
        if group_id == slow[0]:
            if seq == 2:
                third_calls.append(group_id)
                if len(third_calls) == 3:
                    second_calls_made.set()
            while (await engine.status()).policy_version < seq:
                await asyncio.sleep(0.05)

    rows_by_step: list[list[tuple[int, int, float]]] = []  # (version, token id, engine logprob) per row
    real_prepare = loop_module.prepare_packs

    def spy(*args, **kwargs):
        packs = real_prepare(*args, **kwargs)
        rows_by_step.append([
            (int(p.rows.version[i]), int(p.input_ids[p.rows.token[i]]), float(p.rows.engine_logprob[i]))
            for p in packs
            for i in range(len(p.rows.token))
        ])  # fmt: skip
        return packs

    monkeypatch.setattr(loop_module, "prepare_packs", spy)
    # entropy_coef > 0: a group whose rewards happen to be equal is still packed (update.has_gradient)
    cfg = trainer_cfg(mode="async", steps=4, max_policy_lag=2, algorithm={"lr": 1e-3, "entropy_coef": 1e-4})
    trainer = make_trainer(cfg, store, [HoldsVersion2(engine, second_calls_made)], turns=3, before_call=pace)
    trainer.run()

    checkpoints = store.list_checkpoints(trainer.run_id)
    consumed = _consumed(store, trainer.run_id)
    _assert_each_group_consumed_once(consumed)
    holding = [c.version for c in checkpoints if slow[0] in c.group_ids]
    assert holding == [3], f"the slow group must be consumed once, by step 3 (version 2 → 3): {holding}"
    assert slow[0] not in store.list_unconsumed_groups(trainer.run_id), "the slow group is owed still"
    assert all(c.metrics["groups_dropped"] == 0 for c in checkpoints), [c.metrics for c in checkpoints]

    group = store.get_group(slow[0])
    assert len(group.rollouts) == 3 and all(r.rollout.status == "finished" for r in group.rollouts), (
        "every rollout of the group must have run to the end across the publishes"
    )
    for r in group.rollouts:
        served = [sorted(set(c.output_versions.tolist())) for c in r.calls]
        assert served == [[0], [1], [2]], f"call k must have been served by version k alone: {served}"
    ready_at = next(g.ready_at for g in store.list_groups(trainer.run_id) if g.id == slow[0])
    assert checkpoints[1].created_at < ready_at, (
        "step 2 must not wait for the slow group: it was registered before the group completed"
    )
    assert checkpoints[2].metrics["policy_lag_max"] == 2, checkpoints[2].metrics

    expected = sorted(
        (int(v), int(t), round(float(lp), 4))
        for r in group.rollouts
        for c in r.calls[1:]
        for v, t, lp in zip(c.output_versions, c.output_ids, c.output_logprobs, strict=True)
    )
    trained = sorted((v, t, round(lp, 4)) for v, t, lp in rows_by_step[2] if v > 0)
    assert trained == expected, (
        "step 3's rows generated by versions 1 and 2 must be exactly the slow group's calls 1 and 2, "
        "each token with the version and engine logprob its call recorded"
    )
    assert {v for v, _, _ in rows_by_step[2]} == {0, 1, 2}, "version-0 rows come from the calls 0"


def test_in_flight_groups_carry_over_to_the_next_steps(store, trainer_cfg, make_trainer):
    """Async with max_policy_lag 2: the first collect starts (2 + 1) × groups_per_step groups under
    version 0; steps 1-3 train all six of them (lags 0, 1, 2), none dropped."""
    trainer = make_trainer(trainer_cfg(mode="async", steps=3, max_policy_lag=2), store)
    trainer.run()
    first = [b for b in trainer.source.requested if b.policy_version == 0]
    assert sum(b.n_groups for b in first) == 6, (
        f"(max_policy_lag + 1) × groups_per_step groups must be started ahead: {trainer.source.requested}"
    )
    consumed = _consumed(store, trainer.run_id)
    _assert_each_group_consumed_once(consumed)
    versions = [[oldest_version(store.get_group(g)) for g in ids] for ids in consumed]
    assert versions == [[0, 0], [0, 0], [0, 0]], (
        f"the groups still owed or rolling out after step 1 must be trained by steps 2 and 3: {versions}"
    )
    lags = [c.metrics["policy_lag"] for c in store.list_checkpoints(trainer.run_id)]
    assert lags == [0.0, 1.0, 2.0], f"each carried-over group is trained within the bound: {lags}"
    assert trainer.dropped_groups == 0 and store.list_unconsumed_groups(trainer.run_id) == []


def _write_group(store: SqlStore, run_id: str, group_id: str, version: int, n: int = 3) -> None:
    """A complete group whose every token version `version` generated (as a lost predecessor's)."""
    specs = [RolloutSpec(group_id, "toy/0", "reference", version)] * n
    for i, r in enumerate(store.register_rollouts(run_id, specs)):
        store.start_rollout(r.rollout_id, "test")
        out = np.asarray([100 + i, 200 + i, 300 + i], np.int32)
        call = Call(
            rollout_id=r.rollout_id, seq=0, protocol="openai_chat", request={}, response={},
            prompt_ids=np.asarray([1, 2, 3], np.int32), output_ids=out,
            output_logprobs=np.full(3, -5.0, np.float32), output_versions=np.full(3, version, np.int32),
            policy_version=version, finish_reason="stop", temperature=1.0,
        )  # fmt: skip
        store.record_call(call)
        store.finish_rollout(r.rollout_id, "finished", reward=float(i), passed=i > 0)


def test_a_group_past_the_staleness_bound_is_dropped_and_counted(store, trainer_cfg, make_trainer):
    """Async with max_policy_lag 1, trainer at version 2: a complete group generated by version 0 is
    past the bound. The next step consumes it untrained and counts it (step record, Prometheus, the
    trainer); its own groups are trained."""
    trainer = make_trainer(trainer_cfg(mode="async", steps=3, max_policy_lag=1), store)
    trainer.run(steps=2)
    _write_group(store, trainer.run_id, "stale", version=0)
    trainer.run()
    last = store.list_checkpoints(trainer.run_id)[-1]
    assert "stale" in last.group_ids, "the stale group must be consumed by the next checkpoint"
    assert "stale" not in last.metrics["trained_groups"], "a group past the bound must not be trained"
    assert last.metrics["groups_dropped"] == 1 and last.metrics["groups"] == 2, last.metrics
    assert trainer.dropped_groups == 1, "the trainer counts what it dropped"
    exported = generate_latest(trainer.metrics.registry).decode()
    assert "clawgym_trainer_dropped_groups_total 1.0" in exported, "the dropped group must be counted"
    assert "clawgym_trainer_stale_rollouts_total 3.0" in exported, "with its 3 rollouts"
    _assert_each_group_consumed_once(_consumed(store, trainer.run_id))


def _spy_row_versions(monkeypatch, trainers: list, weighted: bool = False) -> list[tuple[int, list[int]]]:
    """Records, per update, the version being trained and the version of every loss row packed (with
    `weighted`, of every row with a loss weight: masked rows are packed as context, weight 0)."""
    seen: list[tuple[int, list[int]]] = []
    real_prepare = loop_module.prepare_packs

    def spy(*args, **kwargs):
        packs = real_prepare(*args, **kwargs)
        rows = [(int(v), float(w)) for p in packs for v, w in zip(p.rows.version, p.rows.weight, strict=True)]
        seen.append((trainers[0].version, [v for v, w in rows if w > 0 or not weighted]))
        return packs

    monkeypatch.setattr(loop_module, "prepare_packs", spy)
    return seen


def _assert_rows_within_bound(seen: list[tuple[int, list[int]]], lag: int) -> None:
    assert seen, "no update packed a row"
    for version, rows in seen:
        assert rows, f"the update at version {version} packed no row"
        assert min(rows) >= version - lag, (
            f"the update at version {version} trained a token of version {min(rows)}: more than "
            f"max_policy_lag {lag} versions older than the weights it updates"
        )


def test_a_group_whose_first_call_came_late_is_not_stale_by_its_request_version(
    store, trainer_cfg, make_trainer, engine, monkeypatch
):
    """Async with max_policy_lag 1: a group requested under version 0 makes its first call only once
    the engine serves version 2. Step 2 (version 1, bound 0) must not wait for it, as it would if
    staleness counted from the request version (nothing else completes: the run would stall until
    rollout_timeout_s); the group is trained once, at lag ≤ 1 from its oldest token, none dropped,
    and no trained row is older than the bound."""
    slow: list[str] = []

    async def pace(group_id: str, seq: int) -> None:
        if not slow:
            slow.append(group_id)
        if group_id == slow[0] and seq == 0:
            while (await engine.status()).policy_version < 2:
                await asyncio.sleep(0.05)

    trainers: list = []
    seen = _spy_row_versions(monkeypatch, trainers)
    cfg = trainer_cfg(mode="async", steps=4, max_policy_lag=1, rollout_timeout_s=30.0,
                      algorithm={"lr": 1e-3, "entropy_coef": 1e-4})  # fmt: skip
    trainers.append(make_trainer(cfg, store, before_call=pace))
    trainer = trainers[0]
    trainer.run()

    group = store.get_group(slow[0])
    assert {r.rollout.policy_version_start for r in group.rollouts} == {0}, "requested under version 0"
    assert oldest_version(group) == 2, "its oldest token must come from version 2, served late"
    checkpoints = store.list_checkpoints(trainer.run_id)
    trained_by = [c.version for c in checkpoints if slow[0] in c.metrics["trained_groups"]]
    assert len(trained_by) == 1 and trained_by[0] - 1 - 2 <= 1, (
        f"the late group must be trained once within max_policy_lag of its oldest token: {trained_by}"
    )
    assert trainer.dropped_groups == 0 and all(c.metrics["groups_dropped"] == 0 for c in checkpoints)
    _assert_each_group_consumed_once(_consumed(store, trainer.run_id))
    _assert_rows_within_bound(seen, lag=1)


def _open_group(store: SqlStore, run_id: str, group_id: str, version: int) -> str:
    """A group with one rollout ended (its call generated by `version`) and one still rolling out,
    written as an orchestrator and proxy would; returns the open rollout's id."""
    ended, rolling = store.register_rollouts(run_id, [RolloutSpec(group_id, "toy/0", "reference", 0)] * 2)
    store.start_rollout(ended.rollout_id, "test")
    store.record_call(_call(ended.rollout_id, version, first=100))
    store.finish_rollout(ended.rollout_id, "finished", reward=0.0, passed=False)
    store.start_rollout(rolling.rollout_id, "test")
    return rolling.rollout_id


def _end(store: SqlStore, rollout_id: str, version: int) -> None:
    store.record_call(_call(rollout_id, version, first=200))
    store.finish_rollout(rollout_id, "finished", reward=1.0, passed=True)


def _call(rollout_id: str, version: int, first: int) -> Call:
    return Call(
        rollout_id=rollout_id, seq=0, protocol="openai_chat", request={}, response={},
        prompt_ids=np.asarray([1, 2, 3], np.int32), output_ids=np.arange(first, first + 3, dtype=np.int32),
        output_logprobs=np.full(3, -5.0, np.float32), output_versions=np.full(3, version, np.int32),
        policy_version=version, finish_reason="stop", temperature=1.0,
    )  # fmt: skip


def test_a_step_waits_for_a_rolling_group_at_its_last_step_and_drops_one_past_it(
    store, trainer_cfg, make_trainer, monkeypatch
):
    """Async with max_policy_lag 1. At version 2 a group still rolling out whose oldest token is of
    version 0 is past the bound: step 3 does not wait for it. At version 3 a group rolling out whose
    oldest token is of version 2 is at its last step: step 4 waits until it completes and trains it;
    the group past the bound, completed meanwhile, is consumed untrained and counted."""
    trainers: list = []
    seen = _spy_row_versions(monkeypatch, trainers)
    cfg = trainer_cfg(mode="async", steps=4, max_policy_lag=1, rollout_timeout_s=30.0,
                      algorithm={"lr": 1e-3, "entropy_coef": 1e-4})  # fmt: skip
    trainers.append(make_trainer(cfg, store))
    trainer = trainers[0]
    trainer.run(steps=2)
    past = _open_group(store, trainer.run_id, "past", version=0)
    started = time.monotonic()
    trainer.run(steps=1)
    assert time.monotonic() - started < 20, "step 3 must not wait for a group already past the bound"
    assert store.open_group_versions(trainer.run_id).get("past") == 0, "the past group still rolls out"

    due = _open_group(store, trainer.run_id, "due", version=2)
    stepping = threading.Thread(target=trainer.run, kwargs={"steps": 1})
    stepping.start()
    time.sleep(4.0)
    assert [c.version for c in store.list_checkpoints(trainer.run_id)] == [1, 2, 3], (
        "step 4 (version 3) must wait for the group whose oldest token is of version 2 (3 - 1)"
    )
    _end(store, past, version=3)
    _end(store, due, version=3)
    stepping.join(timeout=60)
    assert not stepping.is_alive(), "step 4 must go on once the group at its last step completed"

    last = store.list_checkpoints(trainer.run_id)[-1]
    assert last.version == 4 and "due" in last.metrics["trained_groups"], last.metrics
    assert "past" in last.group_ids and "past" not in last.metrics["trained_groups"], (
        "the group past the bound must be consumed without training"
    )
    assert last.metrics["groups_dropped"] == 1 and trainer.dropped_groups == 1, last.metrics
    assert last.metrics["rollout_wait_bound_s"] >= 1.5, (
        f"the step's record must show its wait for the group at its last step: {last.metrics}"
    )
    _assert_each_group_consumed_once(_consumed(store, trainer.run_id))
    _assert_rows_within_bound(seen, lag=1)


def test_a_restarted_trainer_does_not_wait_for_the_rollouts_its_dead_predecessors_source_left(
    store, trainer_cfg, make_trainer, tiny_tok, runner, engine
):
    """Sync with max_policy_lag 1. A toy source's rollouts die with its trainer: here one is left
    running after its first call (of version 1), and the trainer resumed at version 2 would wait at
    step 3 for that group (its last step within the bound) until rollout_timeout_s. The new source
    takes the run's lease and fails those rollouts as lost, so the group completes and step 3 goes on."""
    cfg = trainer_cfg(steps=3, max_policy_lag=1, rollout_timeout_s=60.0)
    first = make_trainer(cfg, store)
    first.run(steps=1)

    async def hang_after_the_first_call(group_id: str, seq: int) -> None:
        if seq == 1:
            await asyncio.Event().wait()  # the process died here

    dead = ToyRolloutSource(store, engine, tiny_tok, runner, before_call=hang_after_the_first_call)
    dead.request(
        Batch(first.run_id, (RolloutRequest("toy/1", "reference", 2),), suite="toy", batch_id="dead")
    )
    deadline = time.monotonic() + 60
    while store.open_group_versions(first.run_id).get("dead-0") is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert store.open_group_versions(first.run_id).get("dead-0") == 1, "test setup: a group left at version 1"
    first.run(steps=1)

    resumed = make_trainer(cfg, store)
    started = time.monotonic()
    resumed.run(steps=1)
    assert time.monotonic() - started < 30, "step 3 must not wait for a dead source's rollouts"
    assert resumed.version == 3
    left = store.list_rollouts(first.run_id, "dead-0")
    assert [r.status for r in left] == ["failed", "failed"], [(r.status, r.error) for r in left]
    assert all("was lost" in r.error for r in left), [r.error for r in left]
    assert "dead-0" in {g for c in store.list_checkpoints(first.run_id) for g in c.group_ids}, (
        "the failed group must be consumed (trained on nothing), never owed again"
    )


def test_a_step_that_must_wait_at_the_bound_trains_the_complete_groups_meanwhile(
    store, trainer_cfg, make_trainer, monkeypatch
):
    """Async, max_policy_lag 1, max_groups_per_step 6 (2 a step). At version 3 a group whose oldest
    token is of version 2 still rolls out: step 4 must train it, and instead of waiting idle it
    takes the complete groups and packs more of them as they arrive (here the toy source's
    groups requested for the next step), while that group rolls out. Once it ends the step trains
    it too and steps; every trained row is within the bound and no group is trained twice."""
    trainers: list = []
    seen = _spy_row_versions(monkeypatch, trainers)
    cfg = trainer_cfg(mode="async", steps=5, max_policy_lag=1, max_groups_per_step=6, rollout_timeout_s=30.0,
                      algorithm={"lr": 1e-3, "entropy_coef": 1e-4})  # fmt: skip
    trainers.append(make_trainer(cfg, store))
    trainer = trainers[0]
    trainer.run(steps=3)
    due = _open_group(store, trainer.run_id, "due", version=2)
    stepping = threading.Thread(target=trainer.run, kwargs={"steps": 1})
    stepping.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and sum(v == 3 for v, _ in seen) < 2:
        time.sleep(0.2)
    assert [c.version for c in store.list_checkpoints(trainer.run_id)] == [1, 2, 3], (
        "step 4 must not commit before the group at its last step is in"
    )
    packed_at_3 = [rows for v, rows in seen if v == 3]
    assert len(packed_at_3) >= 2, (
        f"while the group at its last step rolls out, step 4 packs its groups and more ({len(packed_at_3)} rounds)"
    )
    _end(store, due, version=3)
    stepping.join(timeout=60)
    assert not stepping.is_alive(), "step 4 must step once the group at its last step completed"

    last = store.list_checkpoints(trainer.run_id)[-1]
    m = last.metrics
    assert last.version == 4 and "due" in m["trained_groups"], m
    assert m["groups"] > cfg.groups_per_step and m["groups_filled"] == m["groups"] - cfg.groups_per_step, (
        f"step 4 trains more than groups_per_step groups, the added ones counted: {m}"
    )
    assert m["groups"] <= cfg.max_groups_per_step + 1, f"at most max_groups_per_step and the awaited group: {m}"
    assert m["groups_dropped"] == 0 and trainer.dropped_groups == 0, m
    assert m["update_s"] < m["step_s"], m
    _assert_each_group_consumed_once(_consumed(store, trainer.run_id))
    _assert_rows_within_bound(seen, lag=1)


def test_with_stale_calls_masked_no_step_waits_and_a_late_group_trains_without_its_stale_tokens(
    store, trainer_cfg, make_trainer, monkeypatch
):
    """Async, max_policy_lag 1, stale_calls mask. At version 3 a group whose oldest token is of
    version 2 still rolls out: step 4 does not wait for it. It completes with a call of version 4,
    and the step that takes it (bound 3 or later) trains it with its version-2 tokens masked: packed
    as context with no loss, and counted. A group is dropped only when it has no token left within
    the bound."""
    trainers: list = []
    weighted = _spy_row_versions(monkeypatch, trainers, weighted=True)
    cfg = trainer_cfg(mode="async", steps=6, max_policy_lag=1, stale_calls="mask", rollout_timeout_s=30.0,
                      algorithm={"lr": 1e-3, "entropy_coef": 1e-4})  # fmt: skip
    trainers.append(make_trainer(cfg, store))
    trainer = trainers[0]
    trainer.run(steps=3)
    late = _open_group(store, trainer.run_id, "late", version=2)
    started = time.monotonic()
    trainer.run(steps=1)
    assert time.monotonic() - started < 20, "step 4 must not wait for the group rolling out since version 2"
    assert store.open_group_versions(trainer.run_id).get("late") == 2, "the late group still rolls out"
    _end(store, late, version=4)
    trainer.run(steps=2)

    checkpoints = store.list_checkpoints(trainer.run_id)
    took = [c for c in checkpoints if "late" in c.metrics["trained_groups"]]
    assert len(took) == 1 and took[0].version >= 5, [c.metrics["trained_groups"] for c in checkpoints]
    m = took[0].metrics
    assert m["stale_tokens_masked"] == 3, f"the version-2 call's 3 tokens are masked: {m}"
    assert "late" not in [g for c in checkpoints for g in c.group_ids if g not in c.metrics["trained_groups"]]
    for c in checkpoints:  # toy groups finishing late may drop, but only with no token left within the bound
        for group_id in set(c.group_ids) - set(c.metrics["trained_groups"]):
            group = store.get_group(group_id)
            newest = max(int(call.output_versions.max()) for r in group.rollouts for call in r.calls)
            assert newest < c.version - 1 - cfg.max_policy_lag, (
                f"group {group_id} dropped at version {c.version - 1} with a token of version {newest}"
            )
    _assert_each_group_consumed_once(_consumed(store, trainer.run_id))
    _assert_rows_within_bound(weighted, lag=1)
