"""`GroupFeed`: the complete groups a trainer still owes, from the bus and from sweeps of the store.

Owns knowing which groups are ready to train on; not reading or training them. The store is the
truth (a group is owed while it is complete and no registered checkpoint consumed it); the bus is
the cue that makes waiting cheap:

1. `groups.ready` is read through a consumer group `trainer.<run_id>`; a message stays pending
   until the step that consumed its group is committed (its checkpoint registered), then it is
   acked. A trainer killed in between leaves it pending; the next one claims it at start.
2. The store publishes `groups.ready` after its commit, so a crash in between loses the
   announcement; `sweep()` asks the store for every owed group (at start, before each step's take,
   and every `sweep_interval_s` while waiting), so such a group is trained on anyway.
3. A claimed message whose group was consumed already (the trainer died after its commit, before
   the ack) is acked at once and never handed out; so is an announcement that arrives after a sweep
   found its group and a step consumed it (the bus can lag the store).
"""

import logging
import time

from clawgym.store.bus import GROUPS_READY, EventBus
from clawgym.store.interface import TrajectoryStore

log = logging.getLogger(__name__)


class GroupFeed:
    """Ready, unconsumed groups of one run, oldest first, with the bus messages to ack once consumed."""

    def __init__(
        self,
        store: TrajectoryStore,
        bus: EventBus,
        run_id: str,
        *,
        consumer: str = "trainer-0",
        sweep_interval_s: float = 30.0,
    ) -> None:
        self.store = store
        self.bus = bus
        self.run_id = run_id
        self.group = f"trainer.{run_id}"
        self.consumer = consumer
        self.sweep_interval_s = sweep_interval_s
        self._ready: dict[str, None] = {}  # owed group ids, in arrival order
        self._messages: dict[str, list[str]] = {}  # group id → bus message ids to ack when consumed
        self._taken: set[str] = set()  # handed out, not committed yet: owed, but not to hand out again
        self._consumed: set[str] = set()  # committed by this feed: never owed again
        self.arrived = 0  # distinct groups that became owed since this feed started
        self._last_sweep = float("-inf")
        self.swept = 0  # groups found by a sweep that the bus had not announced (lost announcements)

    def start(self) -> None:
        """Joins the consumer group, takes over a dead trainer's pending messages, sweeps the store."""
        self.bus.ensure_group(GROUPS_READY, self.group, "0")
        while True:
            claimed = self.bus.claim_stale(GROUPS_READY, self.group, self.consumer, min_idle_s=0.0, count=100)
            self._add_messages(claimed)
            if len(claimed) < 100:
                break
        self.sweep()

    def poll(self, block_s: float = 1.0) -> None:
        """Reads new announcements (waiting up to `block_s` for the first); sweeps the store when due."""
        self._add_messages(
            self.bus.read_group(GROUPS_READY, self.group, self.consumer, count=100, block_s=block_s)
        )
        if time.monotonic() - self._last_sweep >= self.sweep_interval_s:
            self.sweep()

    def sweep(self) -> None:
        """Makes the owed set exactly the store's: adds groups whose announcement was lost, and drops
        (acking their messages) groups a committed checkpoint consumed already."""
        owed = self.store.list_unconsumed_groups(self.run_id)
        owed_set = set(owed)
        for group_id in [g for g in self._ready if g not in owed_set]:
            self._ready.pop(group_id)
            self._ack([group_id])
        for group_id in owed:
            if group_id not in self._ready and group_id not in self._taken and group_id not in self._consumed:
                self.swept += group_id not in self._messages
                self._make_owed(group_id)
        self._last_sweep = time.monotonic()

    def ready(self) -> list[str]:
        """Owed group ids, oldest announcement first."""
        return list(self._ready)

    def take(self, n: int) -> list[str]:
        """Up to n owed groups, oldest first; they stay owed (unacked) until `consumed`."""
        return self.take_ids(list(self._ready)[:n])

    def take_ids(self, group_ids: list[str]) -> list[str]:
        """These owed groups (those of them still owed), which stay owed (unacked) until `consumed`."""
        taken = [g for g in group_ids if g in self._ready]
        for group_id in taken:
            self._ready.pop(group_id)
        self._taken.update(taken)
        return taken

    def consumed(self, group_ids: list[str]) -> None:
        """Acks the announcements of groups a registered checkpoint consumed."""
        self._taken.difference_update(group_ids)
        self._consumed.update(group_ids)
        self._ack(group_ids)

    def _ack(self, group_ids: list[str]) -> None:
        ids = [m for g in group_ids for m in self._messages.pop(g, [])]
        if ids:
            self.bus.ack(GROUPS_READY, self.group, ids)

    def _add_messages(self, messages) -> None:
        foreign = []
        for m in messages:
            group_id = m.fields.get("group_id", "")
            if m.fields.get("run_id") != self.run_id or not group_id or group_id in self._consumed:
                # another run's group, or one trained already: nothing to keep pending
                foreign.append(m.id)
                continue
            self._messages.setdefault(group_id, []).append(m.id)
            if group_id not in self._taken and group_id not in self._ready:
                self._make_owed(group_id)
        if foreign:
            self.bus.ack(GROUPS_READY, self.group, foreign)

    def _make_owed(self, group_id: str) -> None:
        self._ready[group_id] = None
        self.arrived += 1
