"""Shared fixtures of the clawgym test suite: real PostgreSQL, real Redis, free loopback ports.

Every test that asks for a database or a bus gets a fresh, private one and leaves nothing behind:

- `pg_url`     — a new schema `t_<random>` in the test database, as an SQLAlchemy URL whose
                 `search_path` points at it; the schema (and any connection a test leaked) is
                 dropped afterwards.
- `sqlite_url` — an SQLite file in the test's tmp_path.
- `store_url`  — parametrized: the test runs once on each of the two above (ids `postgresql`, `sqlite`).
- `redis_url`  — the Redis URL with a unique `?prefix=t_<random>:` namespace (`make_bus` reads it);
                 every key under it is deleted afterwards.
- `bus_url`    — parametrized: `memory://` and `redis_url` (ids `memory`, `redis`).
- `free_port`  — a TCP port on 127.0.0.1 that was free a moment ago (for servers that need a port
                 number before they start; prefer binding port 0 where the server reports it).
- `rpc_secret` — the shared secret the test gRPC servers require and their clients send
                 (`RPC_SECRET`; `rpc_config` is the `rpc` section holding it).

PostgreSQL and Redis are never optional: if one does not answer, the tests using it FAIL with
how to start it (CI starts both; see README). Point them elsewhere with
`CLAWGYM_TEST_PG_URL` (an SQLAlchemy URL of a database the tests may create schemas in) and
`CLAWGYM_TEST_REDIS_URL`.
"""

import asyncio
import os
import tempfile
import threading
import uuid
from collections.abc import Iterator

import pytest
import redis
from sqlalchemy import create_engine, pool, text
from sqlalchemy.engine import make_url

from clawgym_app.runtime import services

DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
START_HINT = "start it as the README says (or point {var} at one); CI starts it"


def _unique(kind: str) -> str:
    return f"t_{kind}{uuid.uuid4().hex[:12]}"


# --- PostgreSQL ---


@pytest.fixture(scope="session")
def pg_admin_url() -> str:
    """The test database itself (CLAWGYM_TEST_PG_URL or postgres@127.0.0.1:5432/test); fails if down."""
    url = os.environ.get("CLAWGYM_TEST_PG_URL", DEFAULT_PG_URL)
    engine = create_engine(url, poolclass=pool.NullPool, connect_args={"connect_timeout": 5})
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception as e:
        pytest.fail(
            f"PostgreSQL at {make_url(url).render_as_string()} is unreachable ({type(e).__name__}: {e}); "
            + START_HINT.format(var="CLAWGYM_TEST_PG_URL"),
            pytrace=False,
        )
    finally:
        engine.dispose()
    return url


@pytest.fixture
def pg_url(pg_admin_url: str) -> Iterator[str]:
    """A fresh PostgreSQL schema for this test, as a store URL (search_path=t_…); dropped afterwards."""
    schema = _unique("pg")
    admin = create_engine(pg_admin_url, poolclass=pool.NullPool)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    url = make_url(pg_admin_url).update_query_dict(
        # application_name tags this test's connections, so teardown can end the ones a test leaked.
        {"options": f"-csearch_path={schema}", "application_name": schema}
    )
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.begin() as conn:
            conn.execute(
                text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = :name"),
                {"name": schema},
            )
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


# --- SQLite ---


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    """A fresh SQLite store file in this test's tmp_path."""
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture(params=["postgresql", "sqlite"])
def store_url(request: pytest.FixtureRequest) -> str:
    """Runs the test on both store backends: a fresh PostgreSQL schema, then a fresh SQLite file."""
    return request.getfixturevalue("pg_url" if request.param == "postgresql" else "sqlite_url")


# --- Redis ---


@pytest.fixture(scope="session")
def redis_base_url() -> str:
    """The test Redis (CLAWGYM_TEST_REDIS_URL or 127.0.0.1:6379/0); fails if it does not answer."""
    url = os.environ.get("CLAWGYM_TEST_REDIS_URL", DEFAULT_REDIS_URL)
    client = redis.Redis.from_url(url, socket_connect_timeout=5)
    try:
        client.ping()
    except Exception as e:
        pytest.fail(
            f"Redis at {url} is unreachable ({type(e).__name__}: {e}); "
            + START_HINT.format(var="CLAWGYM_TEST_REDIS_URL"),
            pytrace=False,
        )
    finally:
        client.close()
    return url


@pytest.fixture
def redis_url(redis_base_url: str) -> Iterator[str]:
    """The test Redis with a private key namespace (`?prefix=t_…:`); its keys are deleted afterwards."""
    prefix = _unique("redis") + ":"
    separator = "&" if "?" in redis_base_url else "?"
    yield f"{redis_base_url}{separator}prefix={prefix}"
    client = redis.Redis.from_url(redis_base_url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*", count=500))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@pytest.fixture(params=["memory", "redis"])
def bus_url(request: pytest.FixtureRequest) -> str:
    """Runs the test on both event buses: in-process (`memory://`) and a namespaced Redis."""
    return "memory://" if request.param == "memory" else request.getfixturevalue("redis_url")


# --- ports ---


@pytest.fixture
def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listened on a moment ago, outside the kernel's ephemeral
    range (a test may start a service on it after its clients dialled it while nothing listened)."""
    return services.free_port()


# --- credentials of the test gRPC services ---

RPC_SECRET = "clawgym-test-rpc-secret"


@pytest.fixture(scope="session")
def rpc_secret() -> str:
    """The secret every test gRPC server requires and its clients send."""
    return RPC_SECRET


@pytest.fixture(scope="session")
def rpc_config() -> dict:
    """The `rpc` config section holding `rpc_secret` (for `ClawgymConfig(rpc=...)`)."""
    return {"secret": RPC_SECRET}


# --- an inference service on loopback ---


class InferenceServerThread:
    """The real inference gRPC server around `engine`, on 127.0.0.1:<free port>, in its own thread/loop
    (the engine stays the caller's: stopping the server does not close it). It requires `secret`
    (`.secret`) and loads checkpoints from under the temp dir, where the tests write theirs."""

    def __init__(self, engine, secret: str = RPC_SECRET) -> None:
        from clawgym.inference.config import InferenceConfig
        from clawgym_services.inference.server import create_server

        self.secret = secret
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        cfg = InferenceConfig(
            model="tiny-qwen3",
            host="127.0.0.1",
            port=0,
            metrics_port=0,
            checkpoint_root=tempfile.gettempdir(),
        )
        self.server = create_server(cfg, engine=engine, secret=secret)
        self.port = asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(30)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(grace=1, close_engine=False), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def serve_inference() -> type[InferenceServerThread]:
    """`serve_inference(engine)` → a started `InferenceServerThread` (`.port`, `.close()`)."""
    return InferenceServerThread
