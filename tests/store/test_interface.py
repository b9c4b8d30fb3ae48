"""Both stores implement the one `TrajectoryStore` interface, so callers cannot tell them apart."""

import inspect

import pytest

from clawgym.store.grpc_client import StoreClient
from clawgym.store.interface import TrajectoryStore
from clawgym.store.sql import SqlStore

METHODS = [n for n, v in vars(TrajectoryStore).items() if inspect.isfunction(v) and not n.startswith("_")]


@pytest.mark.parametrize("implementation", [SqlStore, StoreClient], ids=lambda c: c.__name__)
def test_each_store_has_every_interface_method_with_the_same_parameters(implementation: type) -> None:
    assert len(METHODS) >= 15, f"the interface lost methods: {METHODS}"
    for name in METHODS:
        assert hasattr(implementation, name), f"{implementation.__name__} lacks TrajectoryStore.{name}"
        want = inspect.signature(getattr(TrajectoryStore, name))
        got = inspect.signature(getattr(implementation, name))
        assert list(got.parameters) == list(want.parameters), (
            f"{implementation.__name__}.{name}{got} differs from TrajectoryStore.{name}{want}"
        )
        defaults = [p.default for p in got.parameters.values()]
        assert defaults == [p.default for p in want.parameters.values()], (
            f"{implementation.__name__}.{name} has other defaults than the interface"
        )
