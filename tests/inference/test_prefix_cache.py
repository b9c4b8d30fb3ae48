"""The prefix cache: prompts that start like an earlier one skip that part of the prefill, exactly.

Exactness is the point: a request continued from cached KV must produce the tokens and logprobs a
full prefill would (greedy = HF generate; logprobs = a teacher-forced forward), in-process and
through the gRPC server; KV computed by old weights is never reused after a reload.
"""

import asyncio

import torch

from clawgym.inference.interface import SamplingParams
from clawgym.inference.prefix_cache import PrefixCache
from clawgym.policies import load_model

GREEDY = SamplingParams(max_new_tokens=16, temperature=0.0)
SYSTEM = "You are a shell assistant. Reply with one bash block, then DONE when the task is finished. " * 4


def _shared(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_prompts_sharing_a_prefix_reuse_its_kv_and_generate_exactly(
    engine_factory, serve, collect, hf_greedy, tiny_model, agent_prompts
):
    """A second prompt with the same system prompt, and a repeat of the first, start from the cache;
    their greedy tokens equal HF generate and their sampled logprobs a teacher-forced forward."""
    first, second = agent_prompts[:2]
    torch_engine = engine_factory(tiny_model)
    sampled = SamplingParams(max_new_tokens=16, temperature=0.7, seed=5)

    async def body():
        async with serve(torch_engine) as engine:
            warm = await collect(engine, first, GREEDY)
            again, other, drawn = await asyncio.gather(
                collect(engine, first, GREEDY), collect(engine, second, GREEDY), collect(engine, second, sampled)
            )
            return warm, again, other, drawn

    warm, again, other, drawn = asyncio.run(body())
    assert warm[0] == again[0] == hf_greedy(tiny_model, first, 16), "a cached prompt must decode as a fresh one"
    assert other[0] == hf_greedy(tiny_model, second, 16), "a prompt continued from a shared prefix diverged"
    with torch.no_grad():
        logits = tiny_model(torch.tensor([second + drawn[0]])).logits[0, len(second) - 1 : -1]
    expected = torch.log_softmax(logits / 0.7, dim=-1).gather(1, torch.tensor(drawn[0])[:, None])[:, 0]
    diff = (expected - torch.tensor(drawn[1])).abs().max().item()
    assert diff < 1e-4, f"logprobs after a prefix hit differ from a teacher-forced forward by {diff}"
    shared = _shared(first, second)
    hits = torch_engine.counters().prefix_hit_tokens
    # the repeat reuses all but its last token; both `second` requests reuse at least the system prompt
    assert hits >= (len(first) - 1) + 2 * shared, f"only {hits} prompt tokens came from the cache"
    assert shared > len(first) // 2, "test setup: the prompts must share most of their tokens"


def test_a_later_turn_reuses_the_earlier_turns_prompt(engine_factory, serve, collect, hf_greedy, tiny_model, tiny_tok):
    """Turn 2's prompt extends turn 1's: only the new tokens are prefilled, and the output is exact."""
    torch_engine = engine_factory(tiny_model)
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "List the files."}]
    turn1 = tiny_tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)

    async def body():
        async with serve(torch_engine) as engine:
            ids, *_ = await collect(engine, turn1, GREEDY)
            reply = tiny_tok.decode(ids, skip_special_tokens=True)
            turn2 = tiny_tok.apply_chat_template(
                [*messages, {"role": "assistant", "content": reply}, {"role": "user", "content": "Now count them."}],
                add_generation_prompt=True,
                return_dict=False,
            )
            before = torch_engine.counters().prefill_tokens
            result = await collect(engine, turn2, GREEDY)
            return turn2, result, torch_engine.counters().prefill_tokens - before

    turn2, result, prefilled = asyncio.run(body())
    assert result[0] == hf_greedy(tiny_model, turn2, 16), "turn 2 continued from cached KV diverged"
    assert prefilled <= len(turn2) - _shared(turn1, turn2) + 1, (
        f"turn 2 prefilled {prefilled} of {len(turn2)} tokens; only those after turn 1's prompt were new"
    )


def test_no_kv_of_old_weights_is_reused_after_a_reload(
    engine_factory, serve, collect, hf_greedy, other_checkpoint, agent_prompts
):
    """After a swap, a prompt cached under the old weights is prefilled again by the new ones."""
    folder, new_model = other_checkpoint
    torch_engine = engine_factory(load_model("tiny-qwen3"))
    first = agent_prompts[0]

    async def body():
        async with serve(torch_engine) as engine:
            await collect(engine, first, GREEDY)
            await engine.load_weights(1, str(folder))
            hits = torch_engine.counters().prefix_hit_tokens
            result = await collect(engine, first, GREEDY)
            return hits, result

    hits, result = asyncio.run(body())
    assert torch_engine.counters().prefix_hit_tokens == hits, "KV of the old weights was reused after a reload"
    assert result[0] == hf_greedy(new_model, first, 16) and result[2] == [1] * 16, "new weights did not answer"


def test_prefix_cache_zero_tokens_is_off(engine_factory, serve, collect, tiny_model, agent_prompts):
    torch_engine = engine_factory(tiny_model, prefix_cache_tokens=0)

    async def body():
        async with serve(torch_engine) as engine:
            for _ in range(2):
                await collect(engine, agent_prompts[0], GREEDY)

    asyncio.run(body())
    counters = torch_engine.counters()
    assert counters.prefix_hit_tokens == 0 and counters.prefill_tokens == 2 * len(agent_prompts[0])


# --- the cache's own bookkeeping (no model) ---------------------------------------------------------


def _kv(n: int, fill: float = 0.0) -> list[torch.Tensor]:
    return [torch.full((1, 2, n, 4), fill)]


def test_lookup_takes_the_longest_match_and_leaves_the_last_token():
    cache = PrefixCache(max_tokens=1000, min_hit=2)
    cache.insert(list(range(10)), _kv(10, 1.0), _kv(10, 1.0))
    cache.insert([0, 1, 2, 3, 99, 98], _kv(6, 2.0), _kv(6, 2.0))
    hit = cache.lookup([*range(8), 50])
    assert hit is not None and hit.length == 8 and hit.entry.keys[0][0, 0, 0, 0] == 1.0
    assert cache.lookup(list(range(10))).length == 9, "the last prompt token must stay to be computed"
    assert cache.lookup([0, 7, 7]) is None, "a 1-token match is under min_hit"
    assert cache.lookup([5, 5, 5]) is None


def test_insert_skips_covered_prompts_replaces_extended_ones_and_evicts_least_recent():
    cache = PrefixCache(max_tokens=20, min_hit=1)
    cache.insert([1, 2, 3], _kv(3), _kv(3))
    cache.insert([1, 2], _kv(2), _kv(2))  # covered by [1, 2, 3]
    assert len(cache) == 1 and cache.tokens == 3
    cache.insert([1, 2, 3, 4, 5], _kv(5), _kv(5))  # extends [1, 2, 3]: replaces it
    assert len(cache) == 1 and cache.tokens == 5
    cache.insert([7] * 8, _kv(8), _kv(8))
    cache.lookup([1, 2, 3, 4, 5, 6])  # [1..5] is now the most recent
    cache.insert([9] * 8, _kv(8), _kv(8))  # 21 tokens > 20: the least recent ([7]*8) goes
    assert cache.tokens == 13 and cache.lookup([7] * 4) is None and cache.lookup([1, 2, 3, 4, 9]).length == 4
    cache.insert(list(range(30)), _kv(30), _kv(30))  # larger than the whole budget: not cached
    assert cache.tokens == 13
    cache.clear()
    assert len(cache) == 0 and cache.tokens == 0 and cache.lookup([1, 2, 3]) is None
