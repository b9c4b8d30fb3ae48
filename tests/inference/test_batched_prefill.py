"""Batched prefill: prompts waiting together are prefilled in shared (left-padded) forwards, exactly.

Each test submits its requests while holding the loop's condition lock, so the loop admits them in
one step (it reads its queue only under that lock) and the batching is not left to thread timing.
The references are the same engine prefilling one prompt per forward (`prefill_batch=1`, the old
path), transformers' greedy `generate` at batch 1, and a teacher-forced forward.
"""

import asyncio
import contextlib
import math

import pytest
import torch

from clawgym.inference.interface import SamplingParams

GREEDY = SamplingParams(max_new_tokens=12, temperature=0.0)
SAMPLED = SamplingParams(max_new_tokens=6, temperature=1.0, seed=11)


@contextlib.asynccontextmanager
async def _admitted_together(torch_engine):
    """Holds the loop's queue while the body starts its requests: they are admitted in one step."""
    with torch_engine._loop._cond:  # reentrant: the requests' own `submit` takes it on this thread too
        yield
        for _ in range(5):  # let every started request reach its submit
            await asyncio.sleep(0)


async def _collect_all(torch_engine, prompts, params, collect):
    async with _admitted_together(torch_engine):
        tasks = [
            asyncio.create_task(collect(torch_engine, p, params, f"r{i}:0")) for i, p in enumerate(prompts)
        ]
    return await asyncio.gather(*tasks)


def _teacher_forced(model, prompt, ids, temperature):
    with torch.no_grad():
        logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1]
    return torch.log_softmax(logits / temperature, dim=-1).gather(1, torch.tensor(ids)[:, None])[:, 0]


@pytest.mark.parametrize("chunk", [1024, 48])
def test_prompts_of_different_lengths_prefilled_together_equal_one_at_a_time(
    engine_factory, collect, hf_greedy, tiny_model, prompts, chunk
):
    """Eight prompts of 19 to 80 tokens arriving together: with P = 1024 they are prefilled in at
    most 3 forwards (similar lengths together); with P = 48 in chunks over several steps, rows that
    carry a computed past batched with fresh ones. Either way each request's greedy tokens equal HF
    generate alone and the one-per-forward engine's, and its sampled tokens and logprobs (first token
    included) equal the one-per-forward engine's within fp32 tolerance and a teacher-forced forward."""
    batched = engine_factory(tiny_model, prefill_chunk=chunk, prefix_cache_tokens=0)
    alone = engine_factory(tiny_model, prefill_chunk=chunk, prefix_cache_tokens=0, prefill_batch=1)

    async def body():
        results = {}
        for name, engine in (("batched", batched), ("alone", alone)):
            greedy = await _collect_all(engine, prompts, GREEDY, collect)
            sampled = await _collect_all(engine, prompts, SAMPLED, collect)
            results[name] = greedy, sampled, engine.counters()
        return results

    results = asyncio.run(body())
    (greedy, sampled, counters), (greedy_1, sampled_1, counters_1) = results["batched"], results["alone"]
    assert counters.prefill_tokens == counters_1.prefill_tokens == 2 * sum(map(len, prompts))
    assert counters_1.prefill_forwards == counters_1.prefill_chunks, (
        "prefill_batch=1 runs one prompt per forward"
    )
    if chunk == 1024:
        assert counters.prefill_forwards <= 2 * 3, (
            f"each round's 8 prompts must share <= 3 forwards: {counters}"
        )
    else:
        steps = 2 * math.ceil(sum(map(len, prompts)) / chunk)  # each round needs this many steps at least
        assert counters.prefill_forwards <= steps + 4 < counters.prefill_chunks, (
            f"about one forward per step expected ({steps} steps): {counters}"
        )
    for i, prompt in enumerate(prompts):
        assert greedy[i][0] == hf_greedy(tiny_model, prompt, 12) == greedy_1[i][0], (
            f"prompt {i} greedy diverged"
        )
        ids, logprobs = sampled[i][0], sampled[i][1]
        assert ids == sampled_1[i][0], f"prompt {i}: seeded samples differ between batched and alone"
        diff_alone = (torch.tensor(logprobs) - torch.tensor(sampled_1[i][1])).abs().max().item()
        diff_forward = (
            (torch.tensor(logprobs) - _teacher_forced(tiny_model, prompt, ids, 1.0)).abs().max().item()
        )
        assert diff_alone < 1e-5 and diff_forward < 1e-4, (
            f"prompt {i}: logprobs differ by {diff_alone} from one-per-forward, {diff_forward} from teacher forcing"
        )


def test_running_request_decodes_every_step_while_a_long_prompt_and_a_batch_prefill(
    engine_factory, collect, hf_greedy, tiny_model, prompts
):
    """A request decoding, then a 2000-token prompt and five short ones arriving together, P = 64: the
    short ones are batch-prefilled (with each other and with the long one's chunks) and finish, and
    the decoding request completes, all while the long prompt is still being prefilled; every output
    is exact (the long one's logprobs against a teacher-forced forward)."""
    chunk = 64
    torch_engine = engine_factory(tiny_model, prefill_chunk=chunk, prefix_cache_tokens=0)
    ids = torch.randint(10, tiny_model.config.vocab_size, (2000,), generator=torch.Generator().manual_seed(4))
    long_prompt = ids.tolist()
    shorts = [p[:12] for p in prompts[:5]]
    long_params = SamplingParams(max_new_tokens=4, temperature=0.7, seed=5)

    async def timed(prompt, params, request_id):
        result = await collect(torch_engine, prompt, params, request_id)
        return result, torch_engine.counters().prefill_tokens

    async def body():
        running = asyncio.create_task(
            timed(prompts[0], SamplingParams(max_new_tokens=24, temperature=0), "a:0")
        )
        while torch_engine.counters().decode_steps == 0:  # the first request is decoding
            await asyncio.sleep(0.001)
        async with _admitted_together(torch_engine):
            long = asyncio.create_task(timed(long_prompt, long_params, "b:0"))
            short = [asyncio.create_task(timed(p, GREEDY, f"c{i}:0")) for i, p in enumerate(shorts)]
        return await running, await long, await asyncio.gather(*short), torch_engine.counters()

    (running, running_at), (long, _), short, counters = asyncio.run(body())
    everything = len(prompts[0]) + len(long_prompt) + sum(map(len, shorts))
    assert running[0] == hf_greedy(tiny_model, prompts[0], 24), "the decoding request diverged"
    assert running_at < everything, (
        "the decoding request must get a token every step, not wait for the long prompt"
    )
    for (result, at), prompt in zip(short, shorts, strict=True):
        assert result[0] == hf_greedy(tiny_model, prompt, 12), "a batch-prefilled short prompt diverged"
        assert at < everything, "a short prompt waited for the whole long prompt"
    assert counters.prefill_forwards < counters.prefill_chunks, f"nothing was prefilled together: {counters}"
    diff = (torch.tensor(long[1]) - _teacher_forced(tiny_model, long_prompt, long[0], 0.7)).abs().max().item()
    assert diff < 1e-4, f"the long prompt's logprobs differ from a teacher-forced forward by {diff}"


def test_a_batched_prefill_forward_that_raises_fails_only_its_request(
    engine_factory, collect, hf_greedy, fresh_model, tiny_model, prompts
):
    """The model raises on one request's prompt token (a forward pre-hook: the real model, a real
    exception), inside a forward shared with seven other prompts: the loop reruns the eight one at a
    time, so only that request fails, with its error, and the seven complete exactly."""
    bad = fresh_model.config.vocab_size - 1
    assert all(bad not in p for p in prompts), "test setup: the poison token must be in no other prompt"

    refused = []  # batch size of each forward that raised

    def refuse(module, args, kwargs):
        if bad in kwargs["input_ids"]:
            refused.append(kwargs["input_ids"].shape[0])
            raise ValueError("refused token")

    fresh_model.register_forward_pre_hook(refuse, with_kwargs=True)
    torch_engine = engine_factory(fresh_model, prefill_chunk=1024, prefix_cache_tokens=0)

    async def failing(prompt):
        with pytest.raises(Exception) as caught:
            await collect(torch_engine, prompt, GREEDY, "bad:0")
        return caught.value

    async def body():
        async with _admitted_together(torch_engine):
            bad_task = asyncio.create_task(failing([*prompts[3], bad]))
            good = [
                asyncio.create_task(collect(torch_engine, p, GREEDY, f"r{i}:0"))
                for i, p in enumerate(prompts[:7])
            ]
        return await bad_task, await asyncio.gather(*good), torch_engine.counters()

    error, good, counters = asyncio.run(body())
    assert "refused token" in str(error), f"the failing request must carry its own error: {error!r}"
    for i, result in enumerate(good):
        assert result[0] == hf_greedy(tiny_model, prompts[i], 12) and result[3] == "length", (
            f"request {i} was hit"
        )
    assert counters.finished["error"] == 1 and counters.finished["length"] == 7, counters.finished
    assert refused[0] > 1 and refused[1:] == [1], (
        f"a shared forward must raise, then its rerun alone: {refused}"
    )


def _shared(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@pytest.mark.parametrize("chunk", [1024, 64])
def test_prompts_with_and_without_cached_prefixes_arriving_while_one_decodes_equal_one_at_a_time(
    engine_factory, collect, hf_greedy, tiny_model, prompts, agent_prompts, chunk
):
    """Prefix cache on: one agent prompt is cached, then while a request decodes, seven prompts arrive
    together: that prompt again (all but its last token cached), two more tasks under the same system
    prompt (its KV cached), one task twice (the second copies the first's KV once computed) and two
    prompts sharing nothing. Batched (chunks of cached and fresh rows in shared forwards, P = 1024 or
    64) and one prompt per forward take the same prefix hits and give the same seeded tokens, logprobs
    within fp32 tolerance of each other and of a teacher-forced forward; the decoding request is exact."""
    cached, b, c, d = agent_prompts
    arriving = [cached, b, c, d, d, prompts[2], prompts[5]]
    engines = {
        "batched": engine_factory(tiny_model, prefill_chunk=chunk),
        "alone": engine_factory(tiny_model, prefill_chunk=chunk, prefill_batch=1),
    }
    running_params = SamplingParams(max_new_tokens=40, temperature=0.0)

    async def body(engine):
        await collect(engine, cached, SamplingParams(max_new_tokens=2, temperature=0.0))
        hits_before = engine.counters().prefix_hit_tokens
        steps = engine.counters().decode_steps
        running = asyncio.create_task(collect(engine, prompts[0], running_params, "a:0"))
        while engine.counters().decode_steps == steps:  # the running request is decoding
            await asyncio.sleep(0.001)
        results = await _collect_all(engine, arriving, SAMPLED, collect)
        return await running, results, engine.counters(), engine.counters().prefix_hit_tokens - hits_before

    outcomes = {name: asyncio.run(body(engine)) for name, engine in engines.items()}
    running, results, counters, hits = outcomes["batched"]
    running_1, results_1, _, hits_1 = outcomes["alone"]
    assert running[0] == running_1[0] == hf_greedy(tiny_model, prompts[0], 40), (
        "the decoding request diverged"
    )
    system = _shared(cached, b)
    expected_hits = (
        (len(cached) - 1) + _shared(cached, b) + _shared(cached, c) + _shared(cached, d) + len(d) - 1
    )
    assert hits == hits_1 >= expected_hits, (
        f"prefix hits {hits} (one per forward: {hits_1}), expected {expected_hits}"
    )
    assert system >= 32, "test setup: the agent prompts must share a long system prompt"
    assert counters.prefill_forwards < counters.prefill_chunks, f"nothing was prefilled together: {counters}"
    for i, prompt in enumerate(arriving):
        ids, logprobs = results[i][0], results[i][1]
        assert ids == results_1[i][0], f"prompt {i}: seeded samples differ between batched and alone"
        diff_alone = (torch.tensor(logprobs) - torch.tensor(results_1[i][1])).abs().max().item()
        diff_forward = (
            (torch.tensor(logprobs) - _teacher_forced(tiny_model, prompt, ids, 1.0)).abs().max().item()
        )
        assert diff_alone < 1e-5 and diff_forward < 1e-4, (
            f"prompt {i}: logprobs differ by {diff_alone} from one-per-forward, {diff_forward} from teacher forcing"
        )


def test_groups_behind_a_cached_system_prompt_are_admitted_together(
    engine_factory, collect, hf_greedy, tiny_model, agent_prompts
):
    """A GRPO step's first calls once the system prompt is cached: 4 copies each of two tasks arrive
    together. Each task's first copy starts from the cached system prompt at once, its three copies
    follow it one step later (copying its KV, one token left each), so two steps admit all eight:
    they decode together and their prefill takes at most 3 forwards. Exact against HF generate."""
    warm, b, c, _ = agent_prompts
    torch_engine = engine_factory(tiny_model, prefill_chunk=1024)
    params = SamplingParams(max_new_tokens=3, temperature=0.0)

    async def body():
        await collect(torch_engine, warm, params)
        before = torch_engine.counters()
        results = await _collect_all(torch_engine, [b] * 4 + [c] * 4, params, collect)
        return results, before, torch_engine.counters()

    results, before, after = asyncio.run(body())
    for i, prompt in enumerate([b] * 4 + [c] * 4):
        assert results[i][0] == hf_greedy(tiny_model, prompt, 3), f"request {i} diverged"
    forwards = after.prefill_forwards - before.prefill_forwards
    assert (
        after.prefill_tokens - before.prefill_tokens
        == (len(b) - _shared(warm, b)) + (len(c) - _shared(warm, c)) + 6
    ), f"each task's suffix once, one token per copy: {after}"
    assert forwards <= 3 and max(after.batch_sizes) == 8, (
        f"all eight must be admitted within two steps and decode together: {forwards} forwards, "
        f"decode batch sizes {dict(after.batch_sizes)}"
    )
