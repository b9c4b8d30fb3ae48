"""The engine under attack (issue #16): poisoning sampling parameters, NaN logits, one long prompt.

Each test reproduces an attack on the real engine (tiny-qwen3 on CPU, crafted weights where the
attack needs NaN logits) and asserts it now fails: unsampleable parameters are INVALID_ARGUMENT
before they reach the loop, a row whose logits are NaN fails alone while the others complete, close
is bounded with such requests in flight, and a long prompt cannot delay a short newcomer's first
token beyond the loop's bound (counted in prompt tokens computed, not wall time).
"""

import asyncio
import math
import time

import pytest
import torch

from clawgym.errors import ClawgymError, InvalidArgument
from clawgym.inference.interface import SamplingParams
from clawgym.inference.sampler import make_generator, sample_rows, truncate
from clawgym.inference.validation import FLOAT32_TINY, MIN_TEMPERATURE
from clawgym.policies import load_model

GREEDY = SamplingParams(max_new_tokens=24, temperature=0.0)


# --- the sampler: NaN-proof (no model) ------------------------------------------------------------


def test_sampler_fails_non_finite_rows_alone_and_samples_the_others():
    """NaN or inf logits, or a temperature that float32 rounds to 0, fail their row only: no token,
    no NaN logprob handed out; the finite rows are sampled as before."""
    logits = torch.randn(5, 50, generator=torch.Generator().manual_seed(0))
    logits[1, 7] = float("nan")
    logits[2, 3] = float("inf")
    params = [
        SamplingParams(temperature=1.0),
        SamplingParams(temperature=1.0),
        SamplingParams(temperature=0.0),
        SamplingParams(temperature=1e-320),  # bypassing validation: 0 in float32, logits / 0 = inf/NaN
        SamplingParams(temperature=0.7, top_p=1e-320),  # a nucleus float32 rounds to 0
    ]
    sampled = sample_rows(logits, params, [make_generator(s) for s in range(5)])
    assert sampled.failed == [1, 2, 3], f"rows with unsampleable logits must fail alone: {sampled.failed}"
    for row in sampled.failed:
        assert sampled.tokens[row] == -1 and math.isnan(sampled.logprobs[row]), "a failed row got a token"
    assert sampled.tokens[4] == int(torch.argmax(logits[4])), "a nucleus rounded to 0 keeps the top token"
    expected = torch.log_softmax(logits[0], dim=-1)[sampled.tokens[0]].item()
    assert abs(sampled.logprobs[0] - expected) < 1e-6, "a finite row's logprob changed"
    assert math.isfinite(sampled.logprobs[4]), "the kept token's logprob must be reported"


def test_truncate_always_keeps_the_most_likely_token():
    logp = torch.log_softmax(torch.tensor([0.0, 3.0, 1.0]), dim=-1)
    kept = truncate(logp, top_k=0, top_p=1e-300)
    assert torch.isfinite(kept).tolist() == [False, True, False]


# --- validation: what the engine cannot sample with is refused ---------------------------------------


UNSAMPLEABLE = [
    SamplingParams(max_new_tokens=4, temperature=1e-320),  # the attack: underflows to 0 in float32
    SamplingParams(max_new_tokens=4, temperature=MIN_TEMPERATURE / 2),
    SamplingParams(max_new_tokens=4, temperature=float("nan")),
    SamplingParams(max_new_tokens=4, temperature=float("inf")),
    SamplingParams(max_new_tokens=4, temperature=1e39),  # inf in float32
    SamplingParams(max_new_tokens=4, top_p=1e-320),  # keeps nothing in float32
    SamplingParams(max_new_tokens=4, top_p=float("nan")),
    SamplingParams(max_new_tokens=4, top_p=1.5),
]


def test_unsampleable_parameters_are_invalid_argument_and_the_edges_are_served(
    engine_factory, serve, collect, tiny_model, prompts
):
    """Refused before the loop (in-process and as gRPC INVALID_ARGUMENT); the smallest accepted
    temperature and top_p are sampled normally; a stream in flight is not disturbed."""
    torch_engine = engine_factory(tiny_model)
    edges = [
        SamplingParams(max_new_tokens=8, temperature=MIN_TEMPERATURE, seed=1),
        SamplingParams(max_new_tokens=8, temperature=1.0, top_p=FLOAT32_TINY, seed=1),
    ]

    async def refused(engine, params):
        with pytest.raises(InvalidArgument) as caught:
            await collect(engine, prompts[0], params)
        return caught.value

    async def body():
        async with serve(torch_engine) as engine:
            good = asyncio.create_task(collect(engine, prompts[1], GREEDY))
            errors = [await refused(engine, p) for p in UNSAMPLEABLE]
            served = [await collect(engine, prompts[2], p) for p in edges]
            return await good, errors, served

    good, errors, served = asyncio.run(body())
    assert all(e.grpc_code == "INVALID_ARGUMENT" for e in errors), errors
    assert "temperature" in str(errors[0]) and "top_p" in str(errors[5]), "errors must name the field"
    for ids, logprobs, _, finish, _ in served:
        assert len(ids) == 8 and finish == "length" and all(math.isfinite(x) for x in logprobs), served
    assert good[3] == "length" and len(good[0]) == 24, "the request in flight was disturbed"
    assert torch_engine.counters().finished["error"] == 0, "a refused request reached the loop"


# --- a poisoned row fails alone -----------------------------------------------------------------------


def _greedy_reference(model, prompt: list[int], n: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]), max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0
        )
    return out[0, len(prompt) :].tolist()


@pytest.fixture(scope="module")
def poisoned(tiny_model, prompts):
    """tiny-qwen3 with untied output weights and a NaN embedding for one token `t`: any sequence
    that feeds `t` gets NaN logits from there on, the others are exactly tiny-qwen3. `t` is the
    first greedy token of one prompt (so that request fails at its first decode step, inside the
    batch) and occurs in no other prompt or greedy continuation (so the others are clean)."""
    clean = [_greedy_reference(tiny_model, p, 24) for p in prompts]
    victim = next(
        i
        for i, out in enumerate(clean)
        if all(out[0] not in prompts[j] + clean[j] for j in range(len(prompts)) if j != i)
    )
    token = clean[victim][0]
    model = load_model("tiny-qwen3")
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
    model.config.tie_word_embeddings = False
    with torch.no_grad():
        model.model.embed_tokens.weight[token] = float("nan")
    return model, victim, token, clean


def test_a_row_with_nan_logits_fails_alone_the_others_complete_and_close_is_bounded(
    engine_factory, serve, collect, prompts, poisoned
):
    """Two poisoned requests (NaN at prefill; NaN at the first decode step, while batched with
    seven others) each fail with a clear error; the seven complete exactly; then close() returns
    promptly with a long request still in flight, which ends with 'abort'."""
    model, victim, token, clean = poisoned
    torch_engine = engine_factory(model)
    others = [i for i in range(len(prompts)) if i != victim]

    async def failure(engine, prompt):
        ids = []
        with pytest.raises(ClawgymError) as caught:
            async for chunk in engine.generate(prompt, GREEDY):
                ids += chunk.token_ids
        return ids, caught.value

    async def body():
        async with serve(torch_engine) as engine:
            results = await asyncio.gather(
                failure(engine, prompts[victim]),  # fails in the shared decode step
                failure(engine, [*prompts[others[0]], token]),  # fails at its prefill
                *(collect(engine, prompts[i], GREEDY, f"r{i}") for i in others),
            )
            long = engine.generate(prompts[others[1]], SamplingParams(max_new_tokens=20_000, temperature=0))
            await anext(long)
            started = time.monotonic()
            await torch_engine.aclose()
            closed_in = time.monotonic() - started
            rest = [chunk async for chunk in long]
            return results, closed_in, rest

    (decode_fail, prefill_fail, *done), closed_in, rest = asyncio.run(body())
    assert decode_fail[0] == [token], "the victim's first token (from a clean prefill) must have arrived"
    for _, error in (decode_fail, prefill_fail):
        assert "not finite" in str(error), f"the poisoned request must say why it failed: {error!r}"
    for i, result in zip(others, done, strict=True):
        assert result[0] == clean[i] and result[3] == "length", (
            f"request {i} was disturbed by the poisoned ones"
        )
    assert torch_engine.counters().finished["error"] == 2, torch_engine.counters().finished
    # a step computes at most prefill_chunk prompt tokens and one decode step: well under a second
    # on tiny-qwen3; 20 s allows a loaded 2-core machine and is far below the loop's 30 s join timeout
    assert closed_in < 20, f"close took {closed_in:.1f} s with a request in flight"
    assert rest and rest[-1].finish_reason == "abort", "the request in flight must end with 'abort'"


# --- a long prompt does not stall the others --------------------------------------------------------


def test_a_long_prompt_delays_a_short_newcomer_by_at_most_the_loop_bound(engine_factory, tiny_model, prompts):
    """A ~3000-token prompt prefilled in chunks of P = 64: a request already decoding gets a token
    every step, and a 2-token newcomer of another rollout gets its first token with at most 3P
    prompt tokens computed since its arrival (the step it arrived in, its own, and the one the
    engine may have started before this reads the counter), while the long prompt is still being
    prefilled; under first-come-first-served it waited for all ~3000. The long prompt's logprobs,
    prefilled in pieces between other requests, still equal a teacher-forced forward."""
    chunk = 64
    torch_engine = engine_factory(tiny_model, prefill_chunk=chunk)
    ids = torch.randint(10, tiny_model.config.vocab_size, (3000,), generator=torch.Generator().manual_seed(3))
    long_prompt = ids.tolist()
    sampled = SamplingParams(max_new_tokens=4, temperature=0.7, seed=5)

    async def first_and_rest(prompt, params, request_id):
        stream = torch_engine.generate(prompt, params, request_id)
        before = torch_engine.counters().prefill_tokens
        first = await anext(stream)
        at_first = torch_engine.counters().prefill_tokens
        chunks = [first] + [c async for c in stream]
        return before, at_first, chunks, torch_engine.counters().prefill_tokens

    async def body():
        running = asyncio.create_task(
            first_and_rest(prompts[0], SamplingParams(max_new_tokens=12, temperature=0), "a:0")
        )
        while torch_engine.counters().decode_steps == 0:  # the first request is decoding
            await asyncio.sleep(0.001)
        long = asyncio.create_task(first_and_rest(long_prompt, sampled, "b:0"))
        while torch_engine.counters().prefill_tokens < len(prompts[0]) + 4 * chunk:  # mid-prefill
            await asyncio.sleep(0.001)
        short = await first_and_rest([5, 6], SamplingParams(max_new_tokens=2, temperature=0), "c:0")
        return await running, await long, short

    running, long, short = asyncio.run(body())
    before, at_first, chunks, _ = short
    assert at_first - before <= 3 * chunk, (
        f"{at_first - before} prompt tokens were computed between the short request's arrival and its "
        f"first token; the bound is {3 * chunk}"
    )
    assert at_first < len(prompts[0]) + len(long_prompt), (
        "test setup: the long prompt must still be prefilling"
    )
    assert sum(len(c.token_ids) for c in chunks) == 2 and chunks[-1].finish_reason == "length"
    assert sum(len(c.token_ids) for c in running[2]) == 12, "the decoding request did not complete"
    assert running[3] < len(prompts[0]) + len(long_prompt), (
        "the decoding request must get a token every step: done while the long prompt is still prefilling"
    )
    long_ids = [t for c in long[2] for t in c.token_ids]
    long_logprobs = [x for c in long[2] for x in c.logprobs]
    with torch.no_grad():
        logits = tiny_model(torch.tensor([long_prompt + long_ids])).logits[0, len(long_prompt) - 1 : -1]
    expected = torch.log_softmax(logits / 0.7, dim=-1).gather(1, torch.tensor(long_ids)[:, None])[:, 0]
    diff = (expected - torch.tensor(long_logprobs)).abs().max().item()
    assert diff < 1e-4, f"the chunked long prompt's logprobs differ from a teacher-forced forward by {diff}"


def test_prompts_arriving_together_compute_their_shared_prefix_once(
    engine_factory, collect, hf_greedy, tiny_model, tiny_tok
):
    """A GRPO group (four equal prompts) and a fifth sharing their long system prompt, all at once,
    with prefill shared between them: the common prefix is computed once (the equal prompts wait
    for it, the fifth copies it from the prompt still prefilling) and every output is exact."""
    system = (
        "You are a shell assistant. Reply with one bash block, then DONE when the task is finished. " * 20
    )
    group, other = (
        tiny_tok.apply_chat_template(
            [{"role": "system", "content": system}, {"role": "user", "content": task}],
            add_generation_prompt=True,
            return_dict=False,
        )
        for task in ("Write hello into a.txt.", "Make a folder named logs, then list it and count the files.")
    )
    shared = next(i for i, (a, b) in enumerate(zip(group, other, strict=False)) if a != b)
    torch_engine = engine_factory(tiny_model, prefill_chunk=64)
    params = SamplingParams(max_new_tokens=8, temperature=0)

    async def body():
        return await asyncio.gather(
            *(collect(torch_engine, group, params) for _ in range(4)), collect(torch_engine, other, params)
        )

    results = asyncio.run(body())
    assert all(r[0] == hf_greedy(tiny_model, group, 8) for r in results[:4]), "a group member diverged"
    assert results[4][0] == hf_greedy(tiny_model, other, 8), "the prompt continued from in-flight KV diverged"
    computed = torch_engine.counters().prefill_tokens
    once = len(group) + (len(other) - shared)
    assert shared > 300 and once <= computed <= once + 3, (
        f"{computed} prompt tokens computed; the shared prefix once is {once} (+ the last token of each repeat)"
    )
