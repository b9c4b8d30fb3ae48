"""The `store` config section: where runs, rollouts and calls are kept, and the event bus.

Owns the fields and their defaults; `clawgym.config.ClawgymConfig.store` holds one.
"""

from pydantic import Field

from clawgym.section import Section


class StoreConfig(Section):
    """The trajectory store (SQL, or the store service's address) and the event bus."""

    url: str = Field(
        "sqlite:///clawgym.db", description="SQLAlchemy URL: postgresql+psycopg://… or sqlite:///path"
    )
    bus_url: str = Field("memory://", description="event bus: redis://host:port/db, or memory:// (embedded)")
    grpc_url: str = Field(
        "", description="address of the store service (host:port); empty = in-process store"
    )
    host: str = Field(
        "127.0.0.1",
        description="address `clawgym serve store` and its /metrics listen on; deployments: 0.0.0.0",
    )
    port: int = Field(50051, ge=0, description="port `clawgym serve store` listens on (0 = any free port)")
    metrics_port: int = Field(
        9101, ge=0, description="the store service's Prometheus /metrics port; 0 = none"
    )
    browse_port: int = Field(
        0,
        ge=0,
        description="the store service also serves the rollout browser (read-only, unauthenticated: "
        "every captured call) on this port of `host`; 0 = off",
    )
    browse_allowed_hosts: list[str] = Field(
        [],
        description="Host names the rollout browser answers besides its address (and localhost when it "
        "binds loopback or 0.0.0.0) and IP addresses: e.g. the name a proxy or tunnel serves it by; "
        "`*.example.com` for subdomains, `*` for any. Any other Host gets 403, so a DNS-rebinding page "
        "cannot read the calls",
    )
    max_call_mb: int = Field(
        64, ge=1, description="largest call (packed arrays + JSON) the store accepts, in MiB"
    )
    pool_size: int = Field(
        16, ge=1, description="database connections per store process (one per concurrent writer)"
    )
    pg_batches_in_flight: int = Field(
        2,
        ge=1,
        description="PostgreSQL: batches of concurrent calls written at once, each one execution of a prepared "
        "INSERT (one's commit overlaps the next one's insert; a transaction-pooling proxy in front must keep "
        "named prepared statements); SQLite writes one batch at a time",
    )
    grpc_max_message_mb: int = Field(
        1024,
        ge=1,
        le=2047,
        description="largest gRPC message of the store service and client (a whole group), in MiB",
    )
