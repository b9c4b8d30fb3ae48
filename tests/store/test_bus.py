"""The event bus, the same tests on Redis streams and in memory (`bus_url`): groups, acks, claims."""

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from clawgym.errors import InvalidArgument, NotFound
from clawgym.store.bus import EventBus, make_bus

STREAM, GROUP = "rollouts.done", "trainer"
IDLE_S = 0.3  # how long a message must sit unacked before another consumer may claim it


@pytest.fixture
def bus(bus_url: str) -> Iterator[EventBus]:
    b = make_bus(bus_url)
    yield b
    b.close()


def test_a_message_a_dead_consumer_never_acked_goes_to_another_consumer_after_the_idle_timeout(
    bus: EventBus,
) -> None:
    """Consumer A takes a message and dies before acking; after `min_idle` consumer B claims it, once."""
    bus.ensure_group(STREAM, GROUP)
    sent = bus.publish(STREAM, {"rollout_id": "r1"})
    taken: list = []
    dead = threading.Thread(target=lambda: taken.extend(bus.read_group(STREAM, GROUP, "consumer-a", count=1)))
    dead.start()
    dead.join()  # consumer A is gone without acking
    assert [m.id for m in taken] == [sent], "consumer A must have received the message"
    assert bus.read_group(STREAM, GROUP, "consumer-b") == [], (
        "a delivered message is not handed out again as new"
    )
    assert bus.claim_stale(STREAM, GROUP, "consumer-b", min_idle_s=IDLE_S) == [], (
        "a message pending for less than min_idle must not be taken from its consumer"
    )
    time.sleep(IDLE_S + 0.1)
    claimed = bus.claim_stale(STREAM, GROUP, "consumer-b", min_idle_s=IDLE_S)
    assert [(m.id, m.fields) for m in claimed] == [(sent, {"rollout_id": "r1"})], (
        "B must get A's unacked message"
    )
    assert bus.ack(STREAM, GROUP, [sent]) == 1, "B's ack must clear the pending message"
    time.sleep(IDLE_S + 0.1)
    assert bus.claim_stale(STREAM, GROUP, "consumer-c", min_idle_s=IDLE_S) == [], (
        "an acked message is never claimed"
    )
    assert bus.read_group(STREAM, GROUP, "consumer-c") == [], "an acked message is never redelivered"
    assert bus.pending(STREAM, GROUP) == 0, "nothing may stay pending after the ack"


def test_consumers_sharing_a_group_get_each_message_exactly_once(bus: EventBus) -> None:
    """Three consumers drain 60 messages concurrently, acking as they go: every message once, none twice."""
    bus.ensure_group(STREAM, GROUP)
    sent = [bus.publish(STREAM, {"n": str(n)}) for n in range(60)]
    seen: Counter[str] = Counter()
    lock = threading.Lock()

    def consume(name: str) -> None:
        while batch := bus.read_group(STREAM, GROUP, name, count=4, block_s=0.2):
            with lock:
                seen.update(m.id for m in batch)
            bus.ack(STREAM, GROUP, [m.id for m in batch])

    threads = [threading.Thread(target=consume, args=(f"c{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(seen) == sorted(sent), "every published message must be delivered"
    assert max(seen.values()) == 1, f"messages delivered twice: {[i for i, n in seen.items() if n > 1]}"
    assert bus.claim_stale(STREAM, GROUP, "late", min_idle_s=0) == [], "acked messages cannot be claimed"
    assert bus.pending(STREAM, GROUP) == 0, "all messages were acked"


def test_a_tail_read_returns_messages_after_an_id_and_wakes_on_publish(bus: EventBus) -> None:
    """`read` is a cursor over the stream: after_id excludes, order is kept, a blocked read wakes up."""
    ids = [bus.publish("groups.ready", {"group_id": f"g{n}"}) for n in range(5)]
    assert [m.id for m in bus.read("groups.ready")] == ids, "a read from the start returns all, oldest first"
    assert [m.fields["group_id"] for m in bus.read("groups.ready", ids[1])] == ["g2", "g3", "g4"], (
        "a read after an id returns only later messages"
    )
    assert bus.read("groups.ready", ids[-1]) == [], "nothing comes after the last message"
    late = threading.Timer(0.2, lambda: bus.publish("groups.ready", {"group_id": "late"}))
    late.start()
    started = time.monotonic()
    woken = bus.read("groups.ready", ids[-1], block_s=5.0)
    late.join()  # its publish may still read its reply: the bus closes after the test
    assert [m.fields["group_id"] for m in woken] == ["late"], "a blocked read must return the new message"
    assert time.monotonic() - started < 4.0, "a blocked read must wake on publish, not at its deadline"


def test_reading_a_group_that_does_not_exist_is_not_found(bus: EventBus) -> None:
    bus.publish(STREAM, {"x": "1"})
    with pytest.raises(NotFound):
        bus.read_group(STREAM, "nobody", "c")


def test_redis_namespaces_keep_two_buses_apart(redis_url: str) -> None:
    """Two prefixes on one Redis see only their own streams."""
    ours, theirs = make_bus(redis_url), make_bus(redis_url + "other:")
    try:
        ours.publish(STREAM, {"who": "ours"})
        assert theirs.read(STREAM) == [], "a bus must not see another namespace's messages"
        assert [m.fields["who"] for m in ours.read(STREAM)] == ["ours"], "a bus sees its own messages"
    finally:
        theirs.delete_namespace()  # type: ignore[attr-defined]
        ours.close()
        theirs.close()


def test_bus_urls_other_than_memory_and_redis_are_invalid() -> None:
    with pytest.raises(InvalidArgument):
        make_bus("kafka://localhost:9092")


CONSUMER = """
import sys, time
from clawgym.store.bus import make_bus
bus = make_bus(sys.argv[1])
(m,) = bus.read_group("rollouts.done", "trainer", "doomed", count=1, block_s=10)
print(m.id, flush=True)
time.sleep(120)  # killed here, before it ever acks
"""


def test_a_consumer_process_killed_before_acking_loses_nothing(redis_url: str) -> None:
    """A real process takes a message and is SIGKILLed; another consumer claims it after the idle timeout."""
    bus = make_bus(redis_url)
    bus.ensure_group(STREAM, GROUP)
    sent = bus.publish(STREAM, {"rollout_id": "r-kill"})
    proc = subprocess.Popen([sys.executable, "-c", CONSUMER, redis_url], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().strip()  # type: ignore[union-attr]
        assert line == sent, f"the doomed consumer must have taken the message, said {line!r}"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    time.sleep(IDLE_S + 0.1)
    claimed = bus.claim_stale(STREAM, GROUP, "survivor", min_idle_s=IDLE_S)
    assert [m.fields for m in claimed] == [{"rollout_id": "r-kill"}], (
        "the killed consumer's message must be claimed"
    )
    assert bus.ack(STREAM, GROUP, [m.id for m in claimed]) == 1, "the survivor's ack must settle it"
    assert bus.pending(STREAM, GROUP) == 0, "nothing may stay pending"
    bus.close()
