"""Many threads on one SqlStore: concurrent writers lose nothing, concurrent finishers announce once."""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from clawgym.records import RolloutSpec
from clawgym.store.bus import GROUPS_READY
from clawgym.store.sql import SqlStore

WRITERS = 16
CALLS_PER_WRITER = 200
PROMPT_TOKENS = 20_000
OUTPUT_TOKENS = 64


@pytest.mark.slow
def test_sixteen_writers_of_20k_token_calls_lose_nothing_and_corrupt_nothing(
    store: SqlStore, make_call, expected_arrays
) -> None:
    """16 threads × 200 calls with 20k-token prompts: every call is present and bit-identical."""
    run = store.create_run("concurrent")
    specs = [RolloutSpec(f"g{w % 4}", f"task{w}", "reference") for w in range(WRITERS)]
    rollouts = [r.rollout_id for r in store.register_rollouts(run.id, specs)]
    start = threading.Barrier(WRITERS)

    def write(w: int) -> int:
        start.wait()  # all writers at once
        for seq in range(CALLS_PER_WRITER):
            key = w * CALLS_PER_WRITER + seq
            store.record_call(
                make_call(rollouts[w], seq, key=key, n_prompt=PROMPT_TOKENS, n_output=OUTPUT_TOKENS)
            )
        return CALLS_PER_WRITER

    with ThreadPoolExecutor(WRITERS) as pool:
        written = sum(pool.map(write, range(WRITERS)))
    assert written == WRITERS * CALLS_PER_WRITER, "every writer must finish all its calls without an error"

    for w, rollout_id in enumerate(rollouts):
        calls = store.list_calls(rollout_id)
        assert [c.seq for c in calls] == list(range(CALLS_PER_WRITER)), f"writer {w} lost or reordered calls"
        for c in calls:
            expected = expected_arrays(w * CALLS_PER_WRITER + c.seq, PROMPT_TOKENS, OUTPUT_TOKENS)
            for field, array in expected.items():
                got = getattr(c, field)
                assert got.dtype == array.dtype and got.tobytes() == array.tobytes(), (
                    f"writer {w} call {c.seq}: {field} is not bit-identical (mixed up or corrupted under concurrency)"
                )


def test_concurrent_finishers_announce_each_group_exactly_once(store: SqlStore) -> None:
    """All rollouts of a group ending at the same instant still give one groups.ready, not zero or two."""
    run = store.create_run("finishers")
    groups, size = 4, 8
    specs = [RolloutSpec(f"race{g}", "t", "h") for g in range(groups) for _ in range(size)]
    rollouts = [r.rollout_id for r in store.register_rollouts(run.id, specs)]
    start = threading.Barrier(len(rollouts))

    def finish(rollout_id: str) -> None:
        start.wait()
        store.finish_rollout(rollout_id, "finished", reward=1.0)

    with ThreadPoolExecutor(len(rollouts)) as pool:
        list(pool.map(finish, rollouts))
    announced = sorted(m.fields["group_id"] for m in store.bus.read(GROUPS_READY, count=1000))
    assert announced == [f"race{g}" for g in range(groups)], (
        f"each group must be announced exactly once: {announced}"
    )
