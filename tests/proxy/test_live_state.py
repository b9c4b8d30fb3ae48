"""The live state twins (Redis for replicas, in-process for embedded) behave the same."""

import asyncio
import time

import numpy as np
import pytest

from clawgym.proxy.live import MemoryLiveState, RedisLiveState
from clawgym.records import Rollout
from clawgym.rendering.splice import GeneratedTurn

ROLLOUT = Rollout("r1", "run", "g", "t", "claude-code", "running", None, None, "", 0, "", {}, 1.0)


@pytest.fixture(params=["memory", "redis"])
def live(request):
    """A fresh live state; the Redis one lives in the test's own key namespace (deleted afterwards)."""
    if request.param == "memory":
        return MemoryLiveState()
    return RedisLiveState(request.getfixturevalue("redis_url"), prefix="live")


def test_generated_turns_round_trip_exactly(live):
    async def go():
        turn = GeneratedTurn(b"k" * 16, b"p" * 16, np.array([1, 2, 3], "<i4"), np.array([70000, -1], "<i4"))
        root = GeneratedTurn(b"r" * 16, b"", np.array([5], "<i4"), np.array([], "<i4"))
        await live.put_turn("r1", turn)
        await live.put_turn("r1", root)
        got = await live.get_turns("r1", [b"k" * 16, b"r" * 16, b"x" * 16])
        other = await live.get_turns("r2", [b"k" * 16])
        return got, other

    got, other = asyncio.run(go())
    assert set(got) == {b"k" * 16, b"r" * 16}, "unknown keys are simply absent"
    t = got[b"k" * 16]
    assert (t.parent, t.segment.tolist(), t.output.tolist()) == (b"p" * 16, [1, 2, 3], [70000, -1]), t
    assert got[b"r" * 16].parent == b"" and got[b"r" * 16].output.tolist() == [], "a root turn has no parent"
    assert other == {}, "turns are per rollout"


def test_seq_is_seeded_once_from_the_store_then_counts(live):
    seeded = []

    async def floor():
        seeded.append(1)
        return 3  # three calls already recorded

    async def go():
        return [await live.next_seq("r1", floor) for _ in range(3)]

    assert asyncio.run(go()) == [3, 4, 5], "seq continues after the recorded calls"
    assert len(seeded) == 1, "the store is asked once per rollout"


def test_seq_keeps_its_counter_alive_for_the_turn_ttl(redis_url):
    """Each seq handed out renews the counter's expiry (the script's PEXPIRE)."""
    live = RedisLiveState(redis_url, prefix="live", turn_ttl_s=100.0)

    async def floor():
        return 0

    async def go():
        await live.next_seq("r1", floor)
        key = live._key("seq", "r1")
        await live._redis.pexpire(key, 1000)
        seq = await live.next_seq("r1", floor)
        return seq, await live._redis.pttl(key)

    seq, ttl = asyncio.run(go())
    assert seq == 1 and ttl > 50_000, (seq, ttl)


def test_cached_rollouts_expire(live):
    async def go():
        await live.put_rollout("h", ROLLOUT, ttl_s=0.2)
        hit = await live.get_rollout("h")
        time.sleep(0.3)
        return hit, await live.get_rollout("h")

    hit, later = asyncio.run(go())
    assert hit == ROLLOUT, "a cached rollout comes back whole"
    assert later is None, "and expires after its ttl"
