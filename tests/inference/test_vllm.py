"""The vLLM engine: checkpoint fitting runs everywhere; serving needs a CUDA GPU with vLLM (skipped otherwise)."""

import asyncio
import importlib.util

import pytest
import torch
from safetensors.torch import save_file

from clawgym.errors import FailedPrecondition
from clawgym.inference.config import InferenceConfig
from clawgym.inference.interface import SamplingParams
from clawgym.inference.vllm_engine import check_fits, checkpoint_header
from clawgym.policies import resolve_model

HAS_GPU_VLLM = torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None
gpu = pytest.mark.skipif(not HAS_GPU_VLLM, reason="needs a CUDA GPU and the vllm package")


def test_checkpoint_headers_are_checked_against_the_served_model(tmp_path, tiny_model):
    """The vLLM engine's pre-swap check: same names and shapes pass, anything else is FailedPrecondition."""
    served = checkpoint_header(resolve_model("tiny-qwen3"))
    check_fits(served, served, "same")  # must not raise
    state = {k: v for k, v in tiny_model.state_dict().items() if k != "lm_head.weight"}
    state["model.norm.weight"] = torch.ones(255)
    save_file(state, str(tmp_path / "model.safetensors"))
    with pytest.raises(FailedPrecondition, match=r"model\.norm\.weight \(255,\) != \(256,\)"):
        check_fits(checkpoint_header(tmp_path), served, str(tmp_path))
    with pytest.raises(FailedPrecondition, match=r"no \*\.safetensors"):
        checkpoint_header(tmp_path / "nothing-here")


@pytest.mark.gpu
@gpu
def test_vllm_greedy_logprobs_and_reload_on_tiny_qwen3(
    tiny_model, prompts, other_checkpoint, hf_greedy, collect
):
    """On a GPU: greedy equals HF generate, logprobs match a forward at T=0.7, a reload switches versions
    once and leaves every worker with the checkpoint's weights."""
    from clawgym.inference.vllm_engine import VllmEngine

    folder, _ = other_checkpoint
    cfg = InferenceConfig(model="tiny-qwen3", engine="vllm", dtype="float32", gpu_memory_utilization=0.3)

    async def body():
        engine = VllmEngine.from_config(cfg)
        try:
            greedy = await collect(engine, prompts[0], SamplingParams(max_new_tokens=16, temperature=0))
            sampled = await collect(
                engine, prompts[1], SamplingParams(max_new_tokens=16, temperature=0.7, seed=1)
            )
            stream = engine.generate(prompts[2], SamplingParams(max_new_tokens=400, temperature=0))
            chunks = [await anext(stream)]
            await engine.load_weights(1, str(folder))
            chunks += [c async for c in stream]
            # the workers hold the new weights (called by name: no function is sent to them)
            sums = await engine._llm.collective_rpc("clawgym_weight_checksum")
            return greedy, sampled, [v for c in chunks for v in c.policy_versions], sums
        finally:
            await engine.aclose()

    greedy, sampled, versions, sums = asyncio.run(body())
    assert greedy[0] == hf_greedy(tiny_model, prompts[0], 16), "vLLM greedy diverged from HF generate"
    ids, logprobs = sampled[0], sampled[1]
    with torch.no_grad():
        logits = tiny_model(torch.tensor([prompts[1] + ids])).logits[0, len(prompts[1]) - 1 : -1]
    expected = torch.log_softmax(logits / 0.7, -1).gather(1, torch.tensor(ids)[:, None])[:, 0]
    assert (expected - torch.tensor(logprobs)).abs().max() < 1e-3, "vLLM logprobs are not the tempered ones"
    switch = versions.index(1)
    assert versions == [0] * switch + [1] * (400 - switch), "versions must switch once, mid-stream"
    _, other = other_checkpoint
    tied = other.config.tie_word_embeddings  # vLLM then holds the embedding once
    expected_sum = sum(
        float(t.double().sum()) for n, t in other.state_dict().items() if n != "lm_head.weight" or not tied
    )
    assert sums and all(abs(s - expected_sum) < 1e-3 * max(1.0, abs(expected_sum)) for s in sums), (
        f"the workers' weights after the reload ({sums}) are not the checkpoint's ({expected_sum})"
    )
