"""Every engine implements the one `Engine` interface, `aclose` included, so callers never probe for it."""

import inspect

import pytest

from clawgym.inference.grpc_client import GrpcEngine
from clawgym.inference.interface import Engine
from clawgym.inference.replicas import ReplicatedEngine
from clawgym.inference.scripted import ScriptedEngine
from clawgym.inference.torch_engine import TorchEngine
from clawgym.inference.vllm_engine import VllmEngine

METHODS = [n for n, v in vars(Engine).items() if inspect.isfunction(v) and not n.startswith("_")]
ENGINES = [TorchEngine, VllmEngine, GrpcEngine, ReplicatedEngine, ScriptedEngine]


@pytest.mark.parametrize("implementation", ENGINES, ids=lambda c: c.__name__)
def test_each_engine_has_every_interface_method_with_the_same_parameters(implementation: type) -> None:
    """The runtime, the replica set and the inference service close an engine with `await engine.aclose()`:
    an engine without it (or with a synchronous one) would fail there, at shutdown."""
    assert {"generate", "load_weights", "status", "aclose"} <= set(METHODS), (
        f"the interface lost methods: {METHODS}"
    )
    for name in METHODS:
        assert hasattr(implementation, name), f"{implementation.__name__} lacks Engine.{name}"
        want, got = getattr(Engine, name), getattr(implementation, name)
        assert list(inspect.signature(got).parameters) == list(inspect.signature(want).parameters), (
            f"{implementation.__name__}.{name}{inspect.signature(got)} differs from Engine.{name}"
        )
        assert inspect.iscoroutinefunction(got) == inspect.iscoroutinefunction(want), (
            f"{implementation.__name__}.{name} must be {'async' if inspect.iscoroutinefunction(want) else 'sync'}"
        )
