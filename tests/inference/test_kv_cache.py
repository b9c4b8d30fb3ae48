"""BatchKVCache.keep: rows leave by moving as few rows as possible, and every kept row keeps its KV."""

import random

import torch

from clawgym.inference.kv_cache import BatchKVCache


def _cache(rows: int, layers: int = 2) -> BatchKVCache:
    """Row b's columns hold the value b everywhere (keys) and -b (values); lengths 1..rows."""
    shape = (rows, 3, 16, 4)
    ids = torch.arange(rows, dtype=torch.float32)[:, None, None, None]
    keys = [ids.expand(shape).clone() + 100 * layer for layer in range(layers)]
    values = [-k for k in keys]
    return BatchKVCache(keys, values, 16 - rows, 16, list(range(1, rows + 1)))


def test_kept_rows_keep_their_keys_values_and_lengths_whatever_leaves():
    rng = random.Random(0)
    for _ in range(200):
        rows = rng.randint(1, 12)
        cache = _cache(rows)
        storage = cache.keys[0].untyped_storage().data_ptr()
        kept = sorted(rng.sample(range(rows), rng.randint(1, rows)))
        order = cache.keep(kept)
        assert sorted(order) == kept and cache.rows == len(kept)
        for new, old in enumerate(order):
            assert cache.lengths[new] == old + 1
            for layer, (k, v) in enumerate(zip(cache.keys, cache.values, strict=True)):
                assert torch.equal(k[new], torch.full_like(k[new], old + 100 * layer))
                assert torch.equal(v[new], -k[new])
        assert cache.start == cache.end - max(cache.lengths), "padding no row needs is dropped"
        assert cache.keys[0].untyped_storage().data_ptr() == storage, "no new buffer"


def test_only_the_rows_that_fill_the_holes_move():
    cache = _cache(8)
    assert cache.keep([0, 1, 3, 4, 5, 6, 7]) == [0, 1, 7, 3, 4, 5, 6], "the last row takes row 2's place"
    assert cache.keep([0, 1, 2, 3, 4]) == [0, 1, 2, 3, 4], "the last rows leave: nothing moves"


def _one_row(value: float, length: int, capacity: int = 32) -> BatchKVCache:
    """A prefilled request's cache: `length` columns holding `value` (keys) and -value (values)."""
    cache = BatchKVCache.empty(2, 3, 4, capacity, torch.float32, "cpu")
    for k, v in zip(cache.keys, cache.values, strict=True):
        k[0, :, :length], v[0, :, :length] = value, -value
    cache.end, cache.lengths = length, [length]
    return cache


def _assert_rows(cache: BatchKVCache, expected: list[tuple[float, int]]) -> None:
    """Row b holds expected[b]'s value in its last `length` columns, finite zeros in its padding."""
    assert cache.lengths == [length for _, length in expected] and cache.rows == len(expected)
    for b, (value, length) in enumerate(expected):
        for k, v in zip(cache.keys, cache.values, strict=True):
            assert torch.equal(k[b, :, cache.end - length : cache.end], torch.full((3, length, 4), value))
            assert torch.equal(v[b, :, cache.end - length : cache.end], torch.full((3, length, 4), -value))
            assert not k[b, :, cache.start : cache.end - length].any(), "padding is zeros"
            assert not v[b, :, cache.start : cache.end - length].any()


def test_rows_join_in_place_while_the_buffers_have_room_and_keep_every_row_exact():
    cache = _one_row(1.0, 5)
    cache.merge([_one_row(2.0, 3)], limit=256, max_rows=8)  # one row of room: a re-lay, rows doubled
    _assert_rows(cache, [(1.0, 5), (2.0, 3)])
    buffer = cache.keys[0].untyped_storage().data_ptr()
    cache.merge([_one_row(3.0, 4), _one_row(4.0, 2)], limit=256, max_rows=8)  # fits: in place
    assert cache.keys[0].untyped_storage().data_ptr() == buffer, "the running rows were not copied"
    _assert_rows(cache, [(1.0, 5), (2.0, 3), (3.0, 4), (4.0, 2)])
    cache.keep([1, 2, 3])  # a row leaves, the last one takes its place
    _assert_rows(cache, [(4.0, 2), (2.0, 3), (3.0, 4)])
    cache.merge([_one_row(5.0, 9)], limit=256, max_rows=8)  # wider than the live span: a re-lay
    _assert_rows(cache, [(4.0, 2), (2.0, 3), (3.0, 4), (5.0, 9)])
    cache.merge([_one_row(6.0, 1)] * 5, limit=256, max_rows=8)  # 9 rows: past max_rows, still fits all
    assert cache.rows == 9 and cache.lengths[-1] == 1
