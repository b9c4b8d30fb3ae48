"""The vLLM engine's weight swap, on CPU: a stand-in for vLLM's AsyncLLM records what the engine asks.

The stand-in speaks the same calls with the same signatures as vLLM 0.33 (tests/contracts checks
the engine's calls against the real package); here only the order and the tagging are at stake.
"""

import asyncio
from types import SimpleNamespace

import pytest

from clawgym.errors import Unavailable
from clawgym.inference import vllm_engine
from clawgym.inference.config import InferenceConfig
from clawgym.inference.interface import SamplingParams
from clawgym.inference.vllm_engine import VllmEngine
from clawgym.policies import resolve_model


@pytest.fixture(autouse=True)
def no_vllm_types(monkeypatch):
    """The prompt and sampling objects are vLLM's own; the stand-in takes anything."""
    monkeypatch.setattr(vllm_engine, "tokens_prompt", lambda ids: ids)
    monkeypatch.setattr(vllm_engine, "sampling_params", lambda params, limit: (params, limit))


class StandInLLM:
    """Hands out tokens only while not paused; logs pause, RPCs, resets and resume in order."""

    def __init__(self, resets: list[bool]):
        self.log: list[str] = []
        self.resets = list(resets)
        self.paused = False
        self.weights = 0  # which weights produce the next token
        self.errored = False

    async def generate(self, prompt, sampling, request_id):
        for i in range(6):
            while self.paused:
                await asyncio.sleep(0.001)
            finished = i == 5
            token = 100 * self.weights + i  # the token says which weights produced it
            done = "length" if finished else None
            completion = SimpleNamespace(token_ids=[token], logprobs=[{token: SimpleNamespace(logprob=-1.0)}],
                                         finish_reason=done)  # fmt: skip
            yield SimpleNamespace(outputs=[completion], finished=finished)
            await asyncio.sleep(0.01)

    async def pause_generation(self, *, mode: str = "abort", clear_cache: bool = True) -> None:
        assert mode == "keep" and clear_cache is False, "the swap keeps requests and their queue"
        self.paused = True
        self.log.append("pause")

    async def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        assert isinstance(method, str), "collective_rpc must name the worker method, never send a function"
        self.log.append(f"rpc {method}")
        self.weights += 1

    async def reset_prefix_cache(
        self, reset_running_requests: bool = False, reset_connector: bool = False
    ) -> bool:
        assert reset_running_requests, "running requests' KV came from the old weights: it must go too"
        ok = self.resets.pop(0)
        self.log.append(f"reset {ok}")
        return ok

    async def resume_generation(self) -> None:
        self.paused = False
        self.log.append("resume")

    async def abort(self, request_id) -> None:
        self.log.append("abort")

    def shutdown(self) -> None:
        pass


def engine_over(llm: StandInLLM, attempts: int = 5) -> VllmEngine:
    folder = resolve_model("tiny-qwen3", cache_dir=InferenceConfig().cache_dir)
    return VllmEngine(llm, name="tiny-qwen3", folder=folder, max_context=512, vocab_size=1000,
                      reset_attempts=attempts)  # fmt: skip


async def stream_with_reload(engine: VllmEngine, llm: StandInLLM, folder) -> list[tuple[int, int]]:
    """(token, version) of one request during which version 1 is loaded; the consumer reads slowly."""
    stream = engine.generate([1, 2, 3], SamplingParams(max_new_tokens=6))
    first = await anext(stream)
    await asyncio.sleep(0.025)  # the pump reads ahead while the consumer dawdles
    await engine.load_weights(1, str(folder))
    rest = [c async for c in stream]
    return [(t, v) for c in [first, *rest] for t, v in zip(c.token_ids, c.policy_versions, strict=True)]


def test_every_token_carries_the_version_of_the_weights_that_produced_it():
    """Tokens produced before the swap but read after it keep the old tag; the new tag follows the reset."""
    llm = StandInLLM(resets=[False, False, True])
    engine = engine_over(llm)
    folder = engine.folder
    tagged = asyncio.run(stream_with_reload(engine, llm, folder))
    assert all(token // 100 == version for token, version in tagged), f"mixed tags: {tagged}"
    assert {v for _, v in tagged} == {0, 1}, f"the swap should land mid-stream: {tagged}"
    assert llm.log == [
        "pause", "rpc clawgym_load_files", "reset False", "reset False", "reset True", "resume"
    ], f"swap order: {llm.log}"  # fmt: skip
    assert asyncio.run(engine.status()).policy_version == 1


def test_a_prefix_cache_that_is_never_dropped_fails_the_reload_and_the_engine():
    """The version does not change, the reload raises, and status says why instead of serving mixed KV."""
    llm = StandInLLM(resets=[False] * 3)
    engine = engine_over(llm, attempts=3)
    with pytest.raises(Unavailable, match=r"did not drop its prefix cache in 3 tries"):
        asyncio.run(engine.load_weights(1, str(engine.folder)))
    assert engine._version == 0, "the version must change only after the reset succeeded"
    assert llm.log[-1] == "resume", "the engine is not left paused"
    with pytest.raises(Unavailable, match=r"restart the inference service"):
        asyncio.run(engine.status())
    with pytest.raises(Unavailable):
        asyncio.run(engine.load_weights(2, str(engine.folder)))


def test_cuda_ipc_weight_sync_needs_one_gpu_per_replica():
    """CUDA IPC shares memory within one GPU: a tensor-parallel replica must read files."""
    with pytest.raises(ValueError, match="cuda_ipc needs tensor_parallel_size 1"):
        InferenceConfig(weight_sync="cuda_ipc", tensor_parallel_size=2)
    with pytest.raises(ValueError):
        InferenceConfig(tensor_parallel_size=0)
    assert InferenceConfig(weight_sync="cuda_ipc").tensor_parallel_size == 1
