"""Hot reload: checkpoints swap in between decode steps, in-process and through the gRPC server.

A stream in flight completes, its tokens switch version at exactly one boundary, and later
requests are served by the new weights. A checkpoint that does not fit is refused with
FAILED_PRECONDITION while the old weights keep serving.
"""

import asyncio

import pytest
import torch
from safetensors.torch import save_file

from clawgym.errors import FailedPrecondition
from clawgym.inference.interface import SamplingParams

GREEDY = SamplingParams(max_new_tokens=16, temperature=0.0)


def test_reload_mid_stream_switches_version_at_one_token_boundary(
    engine_factory, serve, collect, hf_greedy, fresh_model, tiny_model, other_checkpoint, prompts
):
    """The stream completes; versions go 0…0 1…1; afterwards greedy output is the new model's."""
    folder, new_model = other_checkpoint
    engine = engine_factory(fresh_model)

    async def body():
        async with serve(engine) as served:
            stream = served.generate(prompts[5], SamplingParams(max_new_tokens=300, temperature=0.0))
            chunks = [await anext(stream)]
            reload_s = await served.load_weights(1, str(folder))
            chunks += [chunk async for chunk in stream]
            status = await served.status()
            after = await collect(served, prompts[0], GREEDY)
            return chunks, reload_s, status, after

    chunks, reload_s, status, after = asyncio.run(body())
    versions = [v for c in chunks for v in c.policy_versions]
    assert chunks[-1].finish_reason == "length" and len(versions) == 300, "the stream did not complete"
    switch = versions.index(1) if 1 in versions else -1
    assert 0 < switch < 300, f"no version switch inside the stream: {versions[:5]}…{versions[-5:]}"
    assert versions == [0] * switch + [1] * (300 - switch), "versions must switch once, at one token boundary"
    assert reload_s > 0 and status.policy_version == 1, f"reload not reported: {reload_s} s, {status}"
    assert after[0] == hf_greedy(new_model, prompts[0], 16), "after the reload the old weights still answer"
    assert after[2] == [1] * 16, "tokens after the reload must carry version 1"
    assert hf_greedy(tiny_model, prompts[0], 16) != after[0], "test setup: old and new weights must differ"


def _misfit_checkpoints(root, model) -> dict[str, str]:
    """Checkpoints that must be refused: a wrong shape, a missing tensor, an unknown tensor, no weights."""
    state = {k: v.clone() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    cases = {}
    wrong = dict(state)
    wrong["model.embed_tokens.weight"] = torch.zeros(10, 256)
    missing = {k: v for k, v in state.items() if "layers.3." not in k}
    unknown = {**state, "model.layers.4.mlp.up_proj.weight": torch.zeros(768, 256)}
    for name, tensors in {"wrong-shape": wrong, "missing": missing, "unknown": unknown}.items():
        (root / name).mkdir()
        save_file(tensors, str(root / name / "model.safetensors"))
        cases[name] = str(root / name)
    (root / "empty").mkdir()
    cases["empty"] = str(root / "empty")
    cases["absent"] = str(root / "no-such-folder")
    return cases


def test_checkpoint_that_does_not_fit_is_refused_and_old_weights_keep_serving(
    engine_factory, serve, collect, hf_greedy, fresh_model, tiny_model, prompts, tmp_path
):
    """Shape/name mismatches and unreadable folders raise FailedPrecondition; version and outputs stay."""
    engine = engine_factory(fresh_model)
    cases = _misfit_checkpoints(tmp_path, tiny_model)

    async def body():
        async with serve(engine) as served:
            stream = asyncio.create_task(
                collect(served, prompts[2], SamplingParams(max_new_tokens=64, temperature=0))
            )
            errors = {}
            for name, uri in cases.items():
                with pytest.raises(FailedPrecondition) as caught:
                    await served.load_weights(5, uri)
                errors[name] = str(caught.value)
            return errors, await stream, await served.status(), await collect(served, prompts[0], GREEDY)

    errors, in_flight, status, after = asyncio.run(body())
    assert "shape" in errors["wrong-shape"] and "model.embed_tokens.weight" in errors["wrong-shape"], errors
    assert "missing" in errors["missing"] and "unknown" in errors["unknown"], errors
    assert status.policy_version == 0, "a refused checkpoint changed the served version"
    assert in_flight[3] == "length" and in_flight[2] == [0] * 64, "the stream in flight was disturbed"
    assert after[0] == hf_greedy(tiny_model, prompts[0], 16), "old weights no longer serve after refusals"
