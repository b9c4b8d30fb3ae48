"""`inference.kv_cache_mb`: the torch engine admits a request only while the running batch, every row
at its prompt + generation limit, fits the budget. Requests beyond it wait (and all complete); the
KV buffers never grow past it, where the same requests with room to spare grow them further; a
request that alone needs more is refused with InvalidArgument, in-process and over gRPC."""

import asyncio

import pytest

from clawgym.errors import InvalidArgument
from clawgym.inference.interface import SamplingParams

NEW = 16  # tokens each request generates


def _budget_mb(engine, rows: int, columns: int) -> float:
    """The budget that holds exactly `rows` rows of `columns` tokens for this engine's model."""
    return rows * columns * engine._loop.slot_bytes / 2**20


def _run_all(engine, prompts: list[list[int]]) -> list[str]:
    async def one(prompt):
        finish = None
        async for chunk in engine.generate(
            prompt, SamplingParams(max_new_tokens=NEW, temperature=0.7, seed=1)
        ):
            finish = chunk.finish_reason
        return finish

    async def body():
        return await asyncio.gather(*(one(p) for p in prompts))

    return asyncio.run(body())


def test_requests_beyond_the_budget_wait_and_the_cache_never_outgrows_it(engine_factory, tiny_model):
    # 16 prompts of one length, so the budget holds exactly 4 rows of them at their generation limit
    batch = [[10 + i, *range(100, 160)] for i in range(16)]
    probe = engine_factory(tiny_model)  # only for its slot size
    budget = _budget_mb(probe, rows=4, columns=len(batch[0]) + NEW)
    tight = engine_factory(tiny_model, kv_cache_mb=budget, prefix_cache_tokens=0)
    roomy = engine_factory(tiny_model, kv_cache_mb=1024, prefix_cache_tokens=0)

    assert _run_all(tight, batch) == ["length"] * len(batch), (
        "every request completes: it waits, it is not refused"
    )
    assert _run_all(roomy, batch) == ["length"] * len(batch)
    tight_c, roomy_c = tight.counters(), roomy.counters()
    budget_bytes = budget * 2**20
    assert max(roomy_c.batch_sizes) > 4 and roomy_c.kv_bytes_peak > budget_bytes, (
        "test setup: with room to spare the same requests must batch wider and hold more KV than the budget"
    )
    assert max(tight_c.batch_sizes) <= 4, (
        f"batch sizes {dict(tight_c.batch_sizes)} beyond the 4 rows the budget holds"
    )
    assert 0 < tight_c.kv_bytes_peak <= budget_bytes, (
        f"the KV buffers reached {tight_c.kv_bytes_peak} bytes, beyond the budget of {budget_bytes:.0f}"
    )


def test_a_request_that_alone_exceeds_the_budget_is_invalid(engine_factory, tiny_model, prompts, serve):
    probe = engine_factory(tiny_model)
    engine = engine_factory(tiny_model, kv_cache_mb=_budget_mb(probe, rows=1, columns=len(prompts[0]) + 8))

    async def body():
        async with serve(engine) as served:
            with pytest.raises(InvalidArgument, match="kv_cache_mb"):
                async for _ in served.generate(prompts[0], SamplingParams(max_new_tokens=64)):
                    pass
            fits = [c async for c in served.generate(prompts[0], SamplingParams(max_new_tokens=8))]
            assert sum(len(c.token_ids) for c in fits) == 8, "a request within the budget is served"

    asyncio.run(body())
