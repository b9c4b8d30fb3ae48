"""The Engine contract on tiny-qwen3, in-process and through the gRPC server (each test runs both ways).

Exactness: greedy tokens equal transformers' `generate`; logprobs equal a teacher-forced forward
at the sampling temperature. Batching: concurrent requests share decode steps. Robustness: bad
requests are refused with INVALID_ARGUMENT while other requests keep being served.
"""

import asyncio

import pytest
import torch

from clawgym.errors import InvalidArgument
from clawgym.inference.interface import SamplingParams

GREEDY = SamplingParams(max_new_tokens=24, temperature=0.0)


def test_greedy_matches_hf_generate_at_batch_one(
    engine_factory, serve, collect, hf_greedy, tiny_model, prompts
):
    """One greedy request alone must produce exactly transformers' greedy tokens."""

    async def body():
        async with serve(engine_factory(tiny_model)) as engine:
            return await collect(engine, prompts[0], GREEDY)

    ids, logprobs, versions, finish, _ = asyncio.run(body())
    assert ids == hf_greedy(tiny_model, prompts[0], 24), "engine greedy diverged from HF generate at batch 1"
    assert finish == "length" and len(logprobs) == len(versions) == 24, "24 tokens must end with 'length'"
    assert versions == [0] * 24, "every token must carry the served policy version"


def test_greedy_matches_hf_generate_with_eight_concurrent_requests(
    engine_factory, serve, collect, hf_greedy, tiny_model, prompts
):
    """Eight concurrent greedy requests (different lengths, batched together) each equal HF generate alone."""

    async def body():
        async with serve(engine_factory(tiny_model)) as engine:
            return await asyncio.gather(*(collect(engine, p, GREEDY, f"r{i}") for i, p in enumerate(prompts)))

    results = asyncio.run(body())
    for i, (prompt, result) in enumerate(zip(prompts, results, strict=True)):
        assert result[0] == hf_greedy(tiny_model, prompt, 24), f"request {i} changed when batched with others"


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_equal_a_teacher_forced_forward(
    engine_factory, serve, collect, hf_greedy, tiny_model, prompts, temperature
):
    """Each logprob is log softmax(logits / T) of the sampled token, as the trainer recomputes it."""
    params = SamplingParams(max_new_tokens=32, temperature=temperature, seed=11)

    async def body():
        async with serve(engine_factory(tiny_model)) as engine:
            return await asyncio.gather(*(collect(engine, p, params) for p in prompts[:4]))

    for prompt, (ids, logprobs, *_rest) in zip(prompts, asyncio.run(body()), strict=False):
        with torch.no_grad():
            logits = tiny_model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1]
        expected = torch.log_softmax(logits / temperature, dim=-1).gather(1, torch.tensor(ids)[:, None])[:, 0]
        diff = (expected - torch.tensor(logprobs)).abs().max().item()
        assert diff < 1e-4, f"logprobs differ from the teacher-forced forward by {diff} at T={temperature}"


def test_eight_concurrent_requests_share_decode_steps(
    engine_factory, serve, collect, hf_greedy, tiny_model, prompts
):
    """Concurrent requests are decoded together: far fewer steps than tokens, most of them at batch 8."""
    torch_engine = engine_factory(tiny_model)
    params = SamplingParams(max_new_tokens=32, temperature=0.0)

    async def body():
        async with serve(torch_engine) as engine:
            await asyncio.gather(*(collect(engine, p, params) for p in prompts))

    asyncio.run(body())
    counters = torch_engine.counters()
    decoded = 8 * 31  # the first token of each request comes from its prefill
    assert counters.decode_rows == decoded, (
        f"decode steps computed {counters.decode_rows} rows, expected {decoded}"
    )
    assert counters.decode_steps < decoded / 3, (
        f"{counters.decode_steps} steps for {decoded} tokens: not shared"
    )
    assert counters.batch_sizes[8] >= 20, (
        f"few steps ran all 8 requests together: {dict(counters.batch_sizes)}"
    )


def test_seeded_sampling_is_reproducible_alone_or_batched(
    engine_factory, serve, collect, hf_greedy, tiny_model, prompts
):
    """A request's seed fixes its sample, whatever else shares the batch."""
    params = SamplingParams(max_new_tokens=20, temperature=1.0, top_p=0.9, top_k=50, seed=1234)

    async def body():
        async with serve(engine_factory(tiny_model)) as engine:
            alone = await collect(engine, prompts[2], params)
            others = SamplingParams(max_new_tokens=20, temperature=1.0)
            batched = await asyncio.gather(
                collect(engine, prompts[2], params), *(collect(engine, p, others) for p in prompts[3:7])
            )
            reseeded = await collect(
                engine, prompts[2], SamplingParams(max_new_tokens=20, temperature=1.0, seed=99)
            )
            return alone[0], batched[0][0], reseeded[0]

    alone, batched, reseeded = asyncio.run(body())
    assert alone == batched, "the same seed sampled differently when batched with other requests"
    assert alone != reseeded, "another seed gave the same 20 sampled tokens: seeds are ignored"


def test_top_k_one_and_tiny_top_p_reduce_sampling_to_greedy(
    engine_factory, serve, collect, hf_greedy, tiny_model, prompts
):
    """Truncation restricts the support: top_k=1 or top_p→0 leaves only the argmax token."""

    async def body():
        async with serve(engine_factory(tiny_model)) as engine:
            greedy = await collect(engine, prompts[1], GREEDY)
            top_k = await collect(engine, prompts[1], SamplingParams(max_new_tokens=24, top_k=1, seed=3))
            top_p = await collect(engine, prompts[1], SamplingParams(max_new_tokens=24, top_p=1e-6, seed=3))
            return greedy[0], top_k[0], top_p[0]

    greedy, top_k, top_p = asyncio.run(body())
    assert top_k == greedy, "top_k=1 sampling must equal greedy decoding"
    assert top_p == greedy, "top_p≈0 sampling must equal greedy decoding"


def test_stop_token_ends_the_request_after_emitting_it(
    engine_factory, serve, collect, hf_greedy, tiny_model, prompts
):
    """A stop token is emitted as the last token, with finish reason 'stop'."""
    reference = hf_greedy(tiny_model, prompts[4], 24)
    stop = reference[5]
    expected = reference[: reference.index(stop) + 1]

    async def body():
        async with serve(engine_factory(tiny_model)) as engine:
            params = SamplingParams(max_new_tokens=24, temperature=0.0, stop_token_ids=(stop,))
            return await collect(engine, prompts[4], params)

    ids, _, _, finish, _ = asyncio.run(body())
    assert ids == expected and finish == "stop", f"expected {expected} + 'stop', got {ids} + {finish!r}"


def test_bad_requests_are_invalid_argument_and_others_keep_being_served(
    engine_factory, serve, collect, hf_greedy, tiny_model, prompts
):
    """Empty prompts, ids outside the vocabulary and context overflows are refused; a stream in flight completes."""
    torch_engine = engine_factory(tiny_model)
    vocab, context = torch_engine.vocab_size, torch_engine.max_context
    bad = [
        ([], GREEDY),
        ([1, 2, vocab], GREEDY),
        ([1, -1], GREEDY),
        ([1] * 10, SamplingParams(max_new_tokens=context - 9)),
        ([1] * 10, SamplingParams(temperature=-1.0)),
    ]

    async def refused(engine, prompt, params):
        with pytest.raises(InvalidArgument) as caught:
            await collect(engine, prompt, params)
        return caught.value

    async def body():
        async with serve(torch_engine) as engine:
            good = asyncio.create_task(
                collect(engine, prompts[0], SamplingParams(max_new_tokens=48, temperature=0))
            )
            errors = [await refused(engine, p, s) for p, s in bad]
            return await good, errors

    (ids, _, _, finish, _), errors = asyncio.run(body())
    assert all(e.grpc_code == "INVALID_ARGUMENT" for e in errors), (
        f"not all refused as INVALID_ARGUMENT: {errors}"
    )
    assert "outside the vocabulary" in str(errors[1]) and "context" in str(errors[3]), (
        "errors must say what is wrong"
    )
    assert ids == hf_greedy(tiny_model, prompts[0], 48) and finish == "length", (
        "the good request was disturbed"
    )


def test_closing_the_stream_aborts_the_request_and_frees_its_slot(
    engine_factory, serve, collect, hf_greedy, tiny_model, prompts
):
    """A caller that stops reading (client gone) aborts its request; the engine is idle again."""
    torch_engine = engine_factory(tiny_model)

    async def body():
        async with serve(torch_engine) as engine:
            stream = engine.generate(prompts[3], SamplingParams(max_new_tokens=5000, temperature=0.0))
            first = await anext(stream)
            await stream.aclose()
            for _ in range(200):
                status = await torch_engine.status()
                if status.running == 0 and torch_engine.counters().finished["abort"] == 1:
                    break
                await asyncio.sleep(0.02)
            after = await collect(engine, prompts[0], GREEDY)
            return first, status, after

    first, status, after = asyncio.run(body())
    assert first.token_ids, "the stream produced no token before it was closed"
    assert status.running == 0 and status.waiting == 0, f"the aborted request still holds a slot: {status}"
    assert torch_engine.counters().finished["abort"] == 1, "the engine did not count the abort"
    assert torch_engine.counters().generated_tokens < 2000, "the aborted request kept generating"
    assert after[0] == hf_greedy(tiny_model, prompts[0], 24), "the engine served wrongly after an abort"


def test_max_new_tokens_zero_generates_up_to_the_context_end(
    engine_factory, serve, collect, hf_greedy, tiny_model, prompts
):
    """max_new_tokens=0 means 'until the context is full', ending with 'length' exactly there."""
    prompt = prompts[7][:20]
    assert len(prompt) == 20, "test setup: the prompt must have 20 tokens"

    async def body():
        async with serve(engine_factory(tiny_model, max_context=48)) as engine:
            status = await engine.status()
            return status, await collect(engine, prompt, SamplingParams(max_new_tokens=0, temperature=0.0))

    status, (ids, _, _, finish, _) = asyncio.run(body())
    assert status.max_context == 48 and status.vocab_size == tiny_model.config.vocab_size, (
        f"status wrong: {status}"
    )
    assert len(ids) == 28 and finish == "length", f"expected 28 tokens to fill 48, got {len(ids)} ({finish})"
    assert ids == hf_greedy(tiny_model, prompt, 28), "tokens at the context end diverged from HF generate"
