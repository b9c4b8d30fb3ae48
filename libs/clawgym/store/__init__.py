"""The trajectory store: runs, rollouts, calls, groups and checkpoints, plus the event bus.

`SqlStore` (in-process, SQLAlchemy on PostgreSQL or SQLite) and `StoreClient` (gRPC) both
implement `TrajectoryStore`; `clawgym.assemble.open_store(cfg)` picks one, `make_bus(url)` gives
the event bus (Redis streams or in-memory). Import the implementations from their modules.
"""
