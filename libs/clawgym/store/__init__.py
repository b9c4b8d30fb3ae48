"""The trajectory store: runs, rollouts, calls, groups and checkpoints, plus the event bus.

`SqlStore` (in-process, SQLAlchemy on PostgreSQL or SQLite) and `StoreClient` (gRPC) both
implement `TrajectoryStore`; `make_bus(url)` gives the event bus (Redis streams or in-memory).
Import the implementations from their modules; this package keeps its import light.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clawgym.config import StoreConfig
    from clawgym.store.interface import TrajectoryStore


def open_store(cfg: "StoreConfig") -> "TrajectoryStore":
    """The store a config names: the service at `cfg.grpc_url` if set, else an in-process SqlStore."""
    if cfg.grpc_url:
        from clawgym.store.grpc_client import StoreClient

        return StoreClient.from_config(cfg)
    from clawgym.store.sql import SqlStore

    return SqlStore.from_config(cfg)
