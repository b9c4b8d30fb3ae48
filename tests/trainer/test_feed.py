"""The trainer's group feed: the store is the truth, the bus a cue that may lag it.

A group found by a sweep, trained and committed before its `groups.ready` announcement is read
must not be owed again when that announcement arrives (it was trained twice, and the second
checkpoint refused, before the feed remembered what it consumed).
"""

from clawgym.records import Checkpoint, RolloutSpec
from clawgym.store.bus import GROUPS_READY
from clawgym.store.bus_memory import MemoryBus
from clawgym.store.sql import SqlStore
from clawgym.trainer.feed import GroupFeed


def _complete_group(store: SqlStore, run_id: str, group_id: str) -> None:
    for r in store.register_rollouts(run_id, [RolloutSpec(group_id, "t", "reference")] * 2):
        store.finish_rollout(r.rollout_id, "finished", reward=1.0, passed=True)


def test_an_announcement_read_after_its_group_was_consumed_is_acked_not_owed(sqlite_url):
    store = SqlStore(sqlite_url, MemoryBus())
    lagging = MemoryBus()  # the feed's bus: announcements reach it only when the test says so
    try:
        run = store.create_run("feed")
        feed = GroupFeed(store, lagging, run.id, sweep_interval_s=3600)
        feed.start()
        _complete_group(store, run.id, "g1")
        feed.sweep()
        assert feed.take(1) == ["g1"] and feed.arrived == 1, "the sweep must find the unannounced group"
        store.record_checkpoint(Checkpoint(run.id, 1, 1, "file:///ckpt/v1", {}, group_ids=("g1",)))
        feed.consumed(["g1"])

        lagging.publish(GROUPS_READY, {"run_id": run.id, "group_id": "g1"})
        feed.poll(block_s=0.1)
        assert feed.ready() == [], "a consumed group was owed again when its late announcement arrived"
        assert lagging.pending(GROUPS_READY, feed.group) == 0, "the late announcement must be acked"
        assert feed.arrived == 1, "a group arrives once"

        _complete_group(store, run.id, "g2")
        lagging.publish(GROUPS_READY, {"run_id": run.id, "group_id": "g2"})
        feed.poll(block_s=0.1)
        feed.sweep()
        assert feed.ready() == ["g2"] and feed.arrived == 2, "announced and swept: owed once"
    finally:
        store.close()
