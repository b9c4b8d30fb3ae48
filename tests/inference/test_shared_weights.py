"""`inference.weight_sync: shared`: the torch engine computes with tensors a trainer in its process lends it.

Lent weights are the lender's own storage (no copy). While the lender changes them the engine is held:
no token is computed between `hold` and the next `share_weights`, which resumes it on the new version,
so a token's version always names the weights that computed it. Tensors that would need a copy (another
dtype) are refused, as is sharing with an engine not set up for it.
"""

import asyncio
import contextlib

import pytest
import torch

from clawgym.errors import FailedPrecondition
from clawgym.inference.config import InferenceConfig
from clawgym.inference.interface import SamplingParams
from clawgym.policies import load_model

GREEDY = SamplingParams(max_new_tokens=16, temperature=0.0)


def lent(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A model's weights as a trainer lends them: HF names, the tied head left out."""
    state = {k: v.detach() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    return state


def test_a_held_engine_computes_nothing_while_the_lender_changes_its_weights(
    engine_factory, collect, hf_greedy, fresh_model, other_checkpoint, prompts
):
    """Storage is shared; during the hold the stream gets no token; after the next share it resumes
    with the next version, and a new request is answered by the changed weights."""
    _, new_model = other_checkpoint
    lender = load_model("tiny-qwen3")
    engine = engine_factory(fresh_model, weight_sync="shared")

    async def body():
        await engine.share_weights(0, lent(lender))
        shared = all(t.data_ptr() == lent(lender)[name].data_ptr() for name, t in engine._targets.items())
        stream = engine.generate(prompts[5], SamplingParams(max_new_tokens=300, temperature=0.0))
        chunks = [await anext(stream)]
        pending = asyncio.ensure_future(anext(stream))
        await engine.hold()
        await asyncio.sleep(0.2)  # tokens computed before the loop parked are delivered by now
        while pending.done() and pending.exception() is None:
            chunks.append(pending.result())
            pending = asyncio.ensure_future(anext(stream))
            await asyncio.sleep(0.05)
        before = sum(len(c.token_ids) for c in chunks)
        with torch.no_grad():
            for p, q in zip(lender.parameters(), new_model.parameters(), strict=True):
                p.copy_(q)  # in place, as an optimizer step
        await asyncio.sleep(0.5)
        during = pending.done()
        await engine.share_weights(1, lent(lender))
        with contextlib.suppress(StopAsyncIteration):  # the stream ended during the hold (a failure)
            chunks.append(await pending)
        chunks += [chunk async for chunk in stream]
        after = await collect(engine, prompts[0], GREEDY)
        return shared, chunks, before, during, after

    shared, chunks, before, during, after = asyncio.run(body())
    assert shared, "the engine's weights must be the lender's own tensors"
    assert before < 300, "the stream ran to its end although the engine was held"
    assert not during, "a held engine computed a token while the lender's weights changed"
    versions = [v for c in chunks for v in c.policy_versions]
    assert len(versions) == 300 and chunks[-1].finish_reason == "length", "the stream did not complete"
    assert versions == [0] * before + [1] * (300 - before), "tokens after the hold must carry version 1"
    assert after[0] == hf_greedy(new_model, prompts[0], 16), "the changed weights must answer"
    assert after[2] == [1] * 16


def test_sharing_refuses_tensors_it_would_have_to_copy_and_an_engine_not_set_up_for_it(
    engine_factory, fresh_model, tiny_model
):
    shared = engine_factory(fresh_model, weight_sync="shared")
    files = engine_factory(load_model("tiny-qwen3"))
    halves = {name: t.to(torch.bfloat16) for name, t in lent(tiny_model).items()}

    async def body():
        errors = []
        for engine, tensors in ((shared, halves), (files, lent(tiny_model))):
            with pytest.raises(FailedPrecondition) as caught:
                await engine.share_weights(1, tensors)
            errors.append(str(caught.value))
        return errors, (await shared.status()).policy_version

    (halves_error, files_error), version = asyncio.run(body())
    assert "torch.float32" in halves_error and "weight_sync files" in halves_error, halves_error
    assert "weight_sync=shared" in files_error, files_error
    assert version == 0, "a refused share changed the served version"


def test_shared_weights_are_for_the_torch_engine():
    with pytest.raises(ValueError, match="weight_sync=shared is for the torch engine"):
        InferenceConfig(engine="vllm", weight_sync="shared")
    assert InferenceConfig(weight_sync="shared").engine == "torch"
