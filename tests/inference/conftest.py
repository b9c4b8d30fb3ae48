"""Fixtures for the engine tests: the tiny-qwen3 policy, its HF reference, and an engine served two ways.

Every engine test runs twice: against the in-process TorchEngine, and against the same engine
behind the real gRPC inference server on a loopback port (its own thread and event loop), reached
through `GrpcEngine`. The test body cannot tell which one it has.
"""

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
import torch

from clawgym.inference.grpc_client import GrpcEngine
from clawgym.inference.interface import Engine, SamplingParams
from clawgym.inference.torch_engine import TorchEngine
from clawgym.policies import load_model, load_tokenizer
from clawgym.policies.tiny_qwen3 import init_weights

TRANSPORTS = ["in-process", "grpc"]


@pytest.fixture(scope="session")
def tiny_tok():
    return load_tokenizer("tiny-qwen3")


@pytest.fixture(scope="session")
def tiny_model():
    """The tiny-qwen3 reference model; engines built on it must never reload (that would change it)."""
    return load_model("tiny-qwen3")


@pytest.fixture
def fresh_model():
    """A private tiny-qwen3 instance: reloading swaps its weights, so it must not be the shared reference."""
    return load_model("tiny-qwen3")


@pytest.fixture(scope="session")
def prompts(tiny_tok):
    """Eight chat prompts of different lengths (so the batch needs left padding)."""
    topics = [
        "cats",
        "the tests",
        "a shell command",
        "JSON",
        "gRPC streams",
        "a bug",
        "the weather",
        "Python",
    ]
    return [
        tiny_tok.apply_chat_template(
            [{"role": "user", "content": f"Tell me about {topic}. " * (i + 1)}],
            add_generation_prompt=True,
            return_dict=False,
        )
        for i, topic in enumerate(topics)
    ]


AGENT_SYSTEM = "You are a careful shell agent. Answer with one bash block and say DONE at the end. " * 4
AGENT_TASKS = [
    "Write hello into a.txt.",
    "Make a folder named logs, then move every .log file of the workspace into it.",
    "Count the lines of every Python file under src/ and write the total into count.txt, one number.",
    "Delete old.md.",
]


@pytest.fixture(scope="session")
def agent_prompts(tiny_tok):
    """First prompts of an agent: one long system prompt, tasks of different lengths."""
    return [
        tiny_tok.apply_chat_template(
            [{"role": "system", "content": AGENT_SYSTEM}, {"role": "user", "content": task}],
            add_generation_prompt=True,
            return_dict=False,
        )
        for task in AGENT_TASKS
    ]


@pytest.fixture(scope="session")
def other_checkpoint(tmp_path_factory, tiny_model):
    """A tiny-qwen3 checkpoint with different weights (another seed), as the trainer would publish it."""
    model = load_model("tiny-qwen3")
    init_weights(model, seed=7, std=0.05)
    folder = tmp_path_factory.mktemp("ckpt-v1")
    model.save_pretrained(folder)
    return folder, model


def _hf_greedy(model, prompt: list[int], max_new_tokens: int) -> list[int]:
    """transformers' own greedy decoding, batch 1, no stop token: the reference."""
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt], device=model.device),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=model.config.pad_token_id,
        )
    return out[0, len(prompt) :].tolist()


async def _collect(engine: Engine, prompt: list[int], params: SamplingParams, request_id: str = ""):
    """Runs one request to the end: (token ids, logprobs, versions, finish reason, chunk count)."""
    ids, logprobs, versions, finish, chunks = [], [], [], None, 0
    async for chunk in engine.generate(prompt, params, request_id):
        ids += chunk.token_ids
        logprobs += chunk.logprobs
        versions += chunk.policy_versions
        finish = chunk.finish_reason
        chunks += 1
    return ids, logprobs, versions, finish, chunks


@contextlib.asynccontextmanager
async def _served(engine: TorchEngine, transport: str, server_thread) -> AsyncIterator[Engine]:
    """`engine` itself, or a GrpcEngine talking to it through the real server."""
    if transport == "in-process":
        yield engine
        return
    server = await asyncio.to_thread(server_thread, engine)
    client = GrpcEngine(f"127.0.0.1:{server.port}", secret=server.secret)
    try:
        yield client
    finally:
        await client.aclose()
        await asyncio.to_thread(server.close)


@pytest.fixture(params=TRANSPORTS)
def transport(request) -> str:
    return request.param


@pytest.fixture
def serve(transport, serve_inference):
    """`serve(engine)`: an async context giving `engine` itself, or a GrpcEngine to it via the real server."""
    return lambda engine: _served(engine, transport, serve_inference)


@pytest.fixture(scope="session")
def collect():
    """`await collect(engine, prompt, params)` → (ids, logprobs, versions, finish, chunk count)."""
    return _collect


@pytest.fixture(scope="session")
def hf_greedy():
    """`hf_greedy(model, prompt, n)`: transformers' own greedy continuation, the reference."""
    return _hf_greedy


@pytest.fixture
def engine_factory():
    """Builds TorchEngines (closed at teardown); use `served(engine, transport)` inside the test's loop."""
    engines: list[TorchEngine] = []

    def make(model, **kwargs) -> TorchEngine:
        # packed weights wherever torch can pack: the engine tests cover that path on every CPU,
        # whatever "auto" would measure here
        kwargs.setdefault("pack_weights", True)
        engine = TorchEngine(model, name="tiny-qwen3", **kwargs)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        asyncio.run(engine.aclose())
