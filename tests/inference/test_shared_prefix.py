"""Shared-prefix decoding: rows whose prompts start alike read one copy of that prefix's KV, exactly.

Exactness is the point, as for the prefix cache: rows decoded over a shared prefix produce the
tokens of HF generate and the logprobs of a teacher-forced forward; a prefix computed by old
weights is never read by a row prefilled by new ones; and the memory it saves admits more rows
under the same KV budget.
"""

import asyncio

import pytest
import torch

from clawgym.inference import shared_prefix
from clawgym.inference.config import InferenceConfig
from clawgym.inference.factory import create_engine
from clawgym.inference.interface import SamplingParams
from clawgym.inference.shared_prefix import SharedPrefix, group_rows, shared_length, shared_prefix_attention
from clawgym.policies import load_model

GREEDY = SamplingParams(max_new_tokens=16, temperature=0.0)
MIN_SHARE = 32


def _system_length(prompts: list[list[int]]) -> int:
    return min(shared_length(torch.tensor(p), [torch.tensor(q) for q in prompts if q != p], 1) for p in prompts)


def test_rows_over_a_shared_prefix_decode_as_hf_generate_and_score_as_a_forward(
    engine_factory, serve, collect, hf_greedy, tiny_model, agent_prompts
):
    """Each task twice, greedy, and once sampled, all at once: the rows share the system prompt and
    still decode exactly; the logprobs equal a teacher-forced forward's."""
    torch_engine = engine_factory(tiny_model, shared_prefix_tokens=MIN_SHARE)
    sampled = SamplingParams(max_new_tokens=16, temperature=0.7, seed=5)

    async def body():
        async with serve(torch_engine) as engine:
            greedy = [collect(engine, p, GREEDY) for p in agent_prompts for _ in range(2)]
            drawn = [collect(engine, p, sampled) for p in agent_prompts]
            return await asyncio.gather(*greedy, *drawn)

    results = asyncio.run(body())
    greedy, drawn = results[: 2 * len(agent_prompts)], results[2 * len(agent_prompts) :]
    for i, prompt in enumerate(agent_prompts):
        expected = hf_greedy(tiny_model, prompt, 16)
        assert greedy[2 * i][0] == greedy[2 * i + 1][0] == expected, f"task {i} diverged over the shared prefix"
        ids, logprobs = drawn[i][0], drawn[i][1]
        with torch.no_grad():
            logits = tiny_model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1]
        want = torch.log_softmax(logits / 0.7, dim=-1).gather(1, torch.tensor(ids)[:, None])[:, 0]
        diff = (want - torch.tensor(logprobs)).abs().max().item()
        assert diff < 1e-4, f"task {i}: logprobs over a shared prefix differ from a forward by {diff}"
    counters = torch_engine.counters()
    assert counters.shared_rows > counters.decode_rows // 2, (
        f"only {counters.shared_rows} of {counters.decode_rows} decode rows read a shared prefix"
    )
    assert _system_length(agent_prompts) >= MIN_SHARE, "test setup: the prompts must share the system prompt"


def test_a_prefix_of_old_weights_is_never_read_by_rows_of_new_ones(
    engine_factory, serve, collect, hf_greedy, other_checkpoint, agent_prompts
):
    """A row still running from before a reload keeps its prefix (its KV is the old weights', as a
    running row's own KV is); a prompt prefilled after the reload decodes over the new weights'."""
    folder, new_model = other_checkpoint
    old_model = load_model("tiny-qwen3")
    torch_engine = engine_factory(load_model("tiny-qwen3"), shared_prefix_tokens=MIN_SHARE)
    first, second = agent_prompts[0], agent_prompts[1]
    long = SamplingParams(max_new_tokens=64, temperature=0.0)

    async def body():
        async with serve(torch_engine) as engine:
            running = [asyncio.create_task(collect(engine, p, long)) for p in (first, second)]
            while torch_engine.counters().shared_rows < 4:  # both rows decode over their prefix
                assert not any(t.done() for t in running), "test setup: the rows ended before the reload"
                await asyncio.sleep(0.01)
            await engine.load_weights(1, str(folder))
            after = await collect(engine, second, GREEDY)
            return await asyncio.gather(*running), after

    (old_first, old_second), after = asyncio.run(body())
    assert after[0] == hf_greedy(new_model, second, 16) and after[2] == [1] * 16, (
        "a prompt prefilled by the new weights read the old weights' prefix"
    )
    assert old_first[2][0] == old_second[2][0] == 0 and old_first[2][-1] == old_second[2][-1] == 1, (
        "test setup: the first rows ran across the reload"
    )
    assert old_first[0][:4] == hf_greedy(old_model, first, 4), "the rows before the reload decoded exactly"


def test_sharing_admits_more_rows_of_a_long_prompt_under_the_same_budget(engine_factory, tiny_model, tiny_tok):
    """A budget that holds 3 whole rows of a long shared prompt holds 8 rows once they share it."""
    system = "Follow the rules of the workspace exactly and answer in one bash block. " * 24
    prompts = [
        tiny_tok.apply_chat_template(
            [{"role": "system", "content": system}, {"role": "user", "content": f"Task number {i}."}],
            add_generation_prompt=True,
            return_dict=False,
        )
        for i in range(8)
    ]
    new = 8
    probe = engine_factory(tiny_model)
    budget = 3 * (len(prompts[0]) + new) * probe._loop.slot_bytes / 2**20

    def run(**kwargs):
        engine = engine_factory(tiny_model, kv_cache_mb=budget, **kwargs)

        async def one(prompt):
            async for _ in engine.generate(prompt, SamplingParams(max_new_tokens=new, temperature=0.0)):
                pass

        async def body():
            await asyncio.gather(*(one(p) for p in prompts))

        asyncio.run(body())
        return engine.counters()

    whole, shared = run(shared_prefix_tokens=0), run(shared_prefix_tokens=MIN_SHARE)
    assert whole.shared_rows == 0, "inference.shared_prefix_tokens 0 keeps every row whole"
    assert max(whole.batch_sizes) <= 3, f"test setup: whole rows must not fit more than 3: {whole.batch_sizes}"
    assert max(shared.batch_sizes) >= 6, f"shared rows batched at most {max(shared.batch_sizes)}"
    assert shared.kv_bytes_peak <= budget * 2**20, "the shared prefix and its rows stay within the budget"


@pytest.mark.parametrize("prefix_cache_tokens", [0, 4096], ids=["no-prefix-cache", "prefix-cache"])
def test_prompts_arriving_beside_a_prefixs_rows_are_prefilled_over_it_exactly(
    engine_factory, serve, collect, hf_greedy, tiny_model, agent_prompts, prefix_cache_tokens
):
    """Two rows run over the system prompt's shared prefix; the tasks sent then (each twice: a GRPO
    group's copies) are prefilled over that one copy instead of computing or copying it, and decode
    as HF generate. With the prefix cache on, a copy also takes its task's columns from the cache."""
    torch_engine = engine_factory(tiny_model, shared_prefix_tokens=MIN_SHARE, prefix_cache_tokens=prefix_cache_tokens)
    system = _system_length(agent_prompts)
    first, later = agent_prompts[:2], agent_prompts[2:] + agent_prompts[:2]
    long = SamplingParams(max_new_tokens=48, temperature=0.0)

    async def body():
        async with serve(torch_engine) as engine:
            running = [asyncio.create_task(collect(engine, p, long)) for p in first]
            while torch_engine.counters().shared_rows < 2:  # the two rows decode over their prefix
                assert not any(t.done() for t in running), "test setup: the first rows ended too soon"
                await asyncio.sleep(0.005)
            arrived = await asyncio.gather(*(collect(engine, p, GREEDY) for p in later for _ in range(2)))
            return await asyncio.gather(*running), arrived

    early, arrived = asyncio.run(body())
    for prompt, result in zip(first, early, strict=True):
        assert result[0] == hf_greedy(tiny_model, prompt, 48), "the first rows decoded exactly"
    for i, prompt in enumerate(later):
        expected = hf_greedy(tiny_model, prompt, 16)
        assert arrived[2 * i][0] == arrived[2 * i + 1][0] == expected, f"task {i} prefilled over the prefix diverged"
    counters = torch_engine.counters()
    # every later prompt read the prefix (at least the system prompt) from the rows' one copy
    assert counters.prefix_row_tokens >= 2 * len(later) * system, (
        f"{counters.prefix_row_tokens} prompt tokens read from a running prefix, want >= {2 * len(later) * system}"
    )
    if prefix_cache_tokens:
        assert counters.prefix_hit_tokens > 0, "a group's second copy takes its task's columns from the cache"


def test_the_engine_a_config_builds_shares_from_its_threshold():
    engine = create_engine(InferenceConfig(model="tiny-qwen3", grpc_url="", shared_prefix_tokens=64))
    try:
        assert engine._loop.min_share == 64
        assert engine.model.config._attn_implementation == "clawgym_shared_prefix"
    finally:
        asyncio.run(engine.aclose())


# --- the attention and the prefix choice alone -------------------------------------------------------


class _Layer(torch.nn.Module):
    layer_idx = 0


@pytest.fixture(params=[False, True], ids=["one-pass", "a-row-a-pass"])
def passes(request, monkeypatch):
    """The attention in one pass over a group's rows, or (scores capped at one row's) a row at a time."""
    if request.param:
        monkeypatch.setattr(shared_prefix, "SCORE_CHUNK", 1)


@pytest.mark.parametrize("every_row", [False, True], ids=["rows-0-2-3", "every-row"])
@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_the_attention_equals_attention_over_the_concatenated_keys(kv_heads, every_row, passes):
    """Rows 0, 2, 3 (or every row) share a 37-column prefix, row 1 has none (or it too); own columns
    are left-padded and masked."""
    torch.manual_seed(0)
    B, H, D, p, w = 4, 4, 8, 37, 11
    lengths = [11, 6, 9, 3]
    prefix = SharedPrefix(torch.arange(p), [torch.randn(1, kv_heads, p, D)], [torch.randn(1, kv_heads, p, D)], 0)
    q, k, v = torch.randn(B, H, 1, D), torch.randn(B, kv_heads, w, D), torch.randn(B, kv_heads, w, D)
    mask = torch.zeros(B, 1, 1, w)
    for b, n in enumerate(lengths):
        mask[b, ..., : w - n] = torch.finfo(torch.float32).min
    prefixes = [prefix, prefix if every_row else None, prefix, prefix]
    groups = group_rows(prefixes, q.device)
    assert (groups.groups[0][0] is None) == every_row, "every row in one prefix is read without gathering"
    out, _ = shared_prefix_attention(_Layer(), q, k, v, mask, scaling=D**-0.5, shared_prefix=groups)

    for b in range(B):
        keys, values = k[b, :, w - lengths[b] :], v[b, :, w - lengths[b] :]
        if prefixes[b] is not None:
            keys = torch.cat([prefix.keys[0][0], keys], dim=1)
            values = torch.cat([prefix.values[0][0], values], dim=1)
        keys = keys.repeat_interleave(H // kv_heads, dim=0)
        values = values.repeat_interleave(H // kv_heads, dim=0)
        want = torch.softmax(q[b] @ keys.transpose(1, 2) * D**-0.5, dim=-1) @ values  # (H, 1, D)
        torch.testing.assert_close(out[b, 0], want[:, 0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kv_heads", [1, 2])
def test_a_prefill_over_the_prefix_equals_causal_attention_over_the_concatenated_keys(kv_heads, passes):
    """n = 5 new tokens a row (a prompt's own tokens after its prefix, left-padded to the longest
    share): each real query sees the prefix, its row's past and its new tokens up to itself; row 1
    reads no prefix. The mask is the one the engine builds for a batched prefill."""
    from clawgym.inference.kv_cache import BatchKVCache

    torch.manual_seed(1)
    H, D, p, n = 4, 8, 23, 5
    pasts, news = [3, 0, 6], [5, 2, 4]  # own columns before the forward, real new tokens
    prefix = SharedPrefix(torch.arange(p), [torch.randn(1, kv_heads, p, D)], [torch.randn(1, kv_heads, p, D)], 0)
    batch = BatchKVCache([torch.zeros(3, kv_heads, max(pasts), D)], [torch.zeros(3, kv_heads, max(pasts), D)],
                         0, max(pasts), pasts)  # fmt: skip
    mask = batch.prefill_rows_mask(news, torch.float32)  # (B, 1, n, past + n)
    w = max(pasts) + n
    q, k, v = torch.randn(3, H, n, D), torch.randn(3, kv_heads, w, D), torch.randn(3, kv_heads, w, D)
    prefixes = [prefix, None, prefix]
    out, _ = shared_prefix_attention(
        _Layer(), q, k, v, mask, scaling=D**-0.5, shared_prefix=group_rows(prefixes, q.device)
    )
    for b in range(3):
        own_k = torch.cat([k[b, :, max(pasts) - pasts[b] : max(pasts)], k[b, :, w - news[b] :]], dim=1)
        own_v = torch.cat([v[b, :, max(pasts) - pasts[b] : max(pasts)], v[b, :, w - news[b] :]], dim=1)
        keys = own_k if prefixes[b] is None else torch.cat([prefix.keys[0][0], own_k], dim=1)
        values = own_v if prefixes[b] is None else torch.cat([prefix.values[0][0], own_v], dim=1)
        keys = keys.repeat_interleave(H // kv_heads, dim=0)
        values = values.repeat_interleave(H // kv_heads, dim=0)
        before = keys.shape[1] - news[b]  # columns every new token sees
        for t in range(news[b]):  # the real queries are the last news[b] of the n
            query = q[b, :, n - news[b] + t : n - news[b] + t + 1]
            seen = before + t + 1
            want = torch.softmax(query @ keys[:, :seen].transpose(1, 2) * D**-0.5, dim=-1) @ values[:, :seen]
            got = out[b, n - news[b] + t]
            torch.testing.assert_close(got, want[:, 0], rtol=1e-5, atol=1e-6)
    assert torch.isfinite(out).all(), "padding queries stay finite"


def test_a_new_prefix_is_what_the_least_alike_prompt_still_shares():
    system = list(range(100))
    a1, a2 = [*system, 7, 7, 7], [*system, 7, 7, 7]
    b, chat = [*system, 9, 9], [*range(10), 5, 5]
    t = torch.tensor
    assert shared_length(t(a1), [t(a2), t(b), t(chat)], 50) == 100, "the system prompt, not task a's whole prompt"
    assert shared_length(t(a1), [t(a2)], 50) == len(a1) - 1, "alone with its copy: all but the last token"
    assert shared_length(t(a1), [t(chat)], 50) == 0, "10 shared tokens are under the threshold"


def test_prompts_behind_a_long_prompt_beyond_the_prefix_cache_wait_and_are_prefilled_over_it(
    engine_factory, collect, hf_greedy, tiny_model, agent_prompts
):
    """A harness prompt longer than the prefix cache (opencode's 7.7k tokens beside the quickstart's
    2,048), one task each, all arriving together: the first is prefilled alone, joins as the first
    row of its system prompt's shared prefix, and the others are prefilled over that one copy (only
    their own tokens), as HF generate decodes them. Without waiting, each computed the whole prompt."""
    from tests.inference.test_batched_prefill import _collect_all

    system = _system_length(agent_prompts)
    cache_tokens = min(map(len, agent_prompts)) - 1  # no prompt fits
    torch_engine = engine_factory(
        tiny_model, shared_prefix_tokens=MIN_SHARE, prefix_cache_tokens=cache_tokens, prefill_chunk=4096
    )
    results = asyncio.run(_collect_all(torch_engine, agent_prompts, GREEDY, collect))
    for prompt, result in zip(agent_prompts, results, strict=True):
        assert result[0] == hf_greedy(tiny_model, prompt, 16), "a prompt prefilled over the prefix diverged"
    counters = torch_engine.counters()
    others = len(agent_prompts) - 1
    assert counters.prefix_row_tokens >= others * system, (
        f"{counters.prefix_row_tokens} prompt tokens read from the first's prefix, want >= {others * system}"
    )
    assert counters.prefill_tokens <= sum(map(len, agent_prompts)) - others * system, (
        f"the system prompt computed more than once: {counters.prefill_tokens} prompt tokens prefilled"
    )
