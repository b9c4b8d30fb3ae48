"""The long-run cache: LRU, and single flight when many render threads want the same run at once."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from clawgym.policies import load_tokenizer
from clawgym.rendering.run_cache import RunCache

SYSTEM = "You are an interactive CLI agent. Prefer editing existing files to creating new ones. " * 200


@pytest.fixture(scope="module")
def encode():
    tok = load_tokenizer("tiny-qwen3")
    return lambda run: tuple(tok.encode(run, add_special_tokens=False))


def test_a_run_wanted_by_many_threads_at_once_is_tokenized_once(encode):
    """16 threads ask for the same run while its first tokenizing is held open: one tokenizes,
    the other 15 wait for its ids, and every thread gets the tokenizer's own ids."""
    started, release = threading.Event(), threading.Event()
    calls: list[str] = []

    def slow(run: str):
        calls.append(run)
        started.set()
        release.wait(10)
        return encode(run)

    cache = RunCache(slow, size=4)
    with ThreadPoolExecutor(16) as pool:
        first = pool.submit(cache.get, SYSTEM)
        assert started.wait(10)
        rest = [pool.submit(cache.get, SYSTEM) for _ in range(15)]
        while cache.shared < 15:  # every other thread is waiting on the flight
            time.sleep(0.01)
        release.set()
        results = [first.result(10)] + [f.result(10) for f in rest]
    assert len(calls) == 1
    assert all(r == encode(SYSTEM) for r in results)
    assert (cache.misses, cache.shared, cache.hits) == (1, 15, 0)
    assert cache.get(SYSTEM) == results[0] and cache.hits == 1


def test_least_recently_used_runs_are_dropped(encode):
    cache = RunCache(encode, size=2)
    a, b, c = (f"{i}: " + SYSTEM for i in "abc")
    cache.get(a), cache.get(b), cache.get(a)  # b is now the least recent
    cache.get(c)
    assert len(cache) == 2 and cache.misses == 3
    cache.get(a)
    assert cache.hits == 2  # a kept
    cache.get(b)
    assert cache.misses == 4  # b was dropped


def test_a_failed_tokenizing_is_not_kept_and_its_waiters_tokenize_themselves(encode):
    started, release = threading.Event(), threading.Event()
    attempts: list[str] = []

    def flaky(run: str):
        attempts.append(threading.current_thread().name)
        if len(attempts) == 1:  # the leader fails after the waiter has joined its flight
            started.set()
            release.wait(10)
            raise RuntimeError("tokenizer failed")
        return encode(run)

    cache = RunCache(flaky, size=2)
    with ThreadPoolExecutor(2) as pool:
        leader = pool.submit(cache.get, SYSTEM)
        assert started.wait(10)
        waiter = pool.submit(cache.get, SYSTEM)
        while cache.shared < 1:
            time.sleep(0.01)
        release.set()
        with pytest.raises(RuntimeError, match="tokenizer failed"):
            leader.result(10)
        assert waiter.result(10) == encode(SYSTEM)
    assert len(cache) == 0 and len(attempts) == 2
    assert cache.get(SYSTEM) == encode(SYSTEM) and len(cache) == 1


def test_what_is_kept_is_bounded_in_bytes_and_a_run_over_the_budget_is_never_kept(encode):
    """Issue #16 item 3: 64 entries of multi-megabyte runs pinned gigabytes. Runs of 17 kB each
    (text + ids ~0.2 MB kept) against a 1 MiB budget: the least recently used are dropped so what
    is kept stays within it, and a run larger than the whole budget, or with more ids than the
    caller's context, is tokenized (its ids are right) but not kept, so it does not flush the others."""
    budget = 2**20
    cache = RunCache(encode, size=64, max_bytes=budget)
    runs = [f"{i}: " + SYSTEM for i in range(10)]
    for run in runs:
        assert cache.get(run) == encode(run)
        assert cache.nbytes <= budget, f"{cache.nbytes} bytes kept, over the {budget} budget"
    assert 1 < len(cache) < 10, f"{len(cache)} of 10 runs kept: the byte budget bounds them, not the count"
    kept = len(cache)
    huge = SYSTEM * 8  # 138 kB of text, ~1.7 MB kept: alone over the budget
    assert cache.get(huge) == encode(huge)
    assert len(cache) == kept and cache.nbytes <= budget, "a run over the budget is not kept"
    assert cache.get(runs[-1]) == encode(runs[-1]) and cache.hits == 1, "the newest run is still kept"
    longer = "longer than the context: " + SYSTEM
    assert cache.get(longer, keep_max_ids=1000) == encode(longer)
    assert len(cache) == kept, "a run with more ids than the context holds fits no prompt: not kept"
