"""`inference.device`: the torch engine runs where the config puts it (CPU here; CUDA where there is one)."""

import asyncio

import pytest
import torch
from pydantic import ValidationError

from clawgym.inference.config import InferenceConfig
from clawgym.inference.factory import create_engine
from clawgym.inference.interface import SamplingParams

DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")],
    ),
]


@pytest.mark.parametrize("device", DEVICES)
def test_create_engine_runs_the_policy_on_inference_device(device, prompts, hf_greedy, collect):
    """`create_engine` puts the weights on `inference.device`, and greedy decoding there equals
    transformers' own greedy decoding of the same model at batch 1."""
    engine = create_engine(InferenceConfig(model="tiny-qwen3", device=device))
    try:
        assert next(engine.model.parameters()).device.type == device, "weights not on inference.device"

        async def body():
            return await collect(engine, prompts[1], SamplingParams(max_new_tokens=12, temperature=0.0))

        ids, logprobs, *_ = asyncio.run(body())
    finally:
        asyncio.run(engine.aclose())
    assert ids == hf_greedy(engine.model, prompts[1], 12), (
        f"greedy tokens on {device} differ from HF generate"
    )
    assert len(logprobs) == 12, "one logprob per generated token"


@pytest.mark.parametrize("good", ["cpu", "cuda", "cuda:1"])
def test_inference_device_takes_cpu_cuda_and_an_index(good):
    assert InferenceConfig(device=good).device == good


@pytest.mark.parametrize("bad", ["gpu", "CUDA", "cuda:x", "mps", ""])
def test_inference_device_refuses_anything_else(bad):
    with pytest.raises(ValidationError):
        InferenceConfig(device=bad)
