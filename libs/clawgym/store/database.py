"""SQLAlchemy engines for the trajectory store: one code path, PostgreSQL (psycopg 3) or SQLite.

Owns connection settings per backend; not the schema (`models`, `migrations`) or queries (`sql`).

- PostgreSQL: `postgresql+psycopg://…` (a bare `postgresql://` gets the psycopg 3 driver); a pool
  as large as the number of concurrent writers, so none waits for a connection.
- SQLite: a file (`sqlite:///path.db`), in WAL mode so readers never block the writer, with a
  busy timeout so concurrent writers queue instead of failing. Write transactions start with
  `BEGIN IMMEDIATE`: they take the write lock up front, so a read-then-write transaction can
  never deadlock on upgrading its lock (SQLite would answer SQLITE_BUSY at once). Reads use a
  plain deferred `BEGIN` through `read_only(engine)`.
"""

from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url

from clawgym.errors import InvalidArgument

SQLITE_BUSY_TIMEOUT_S = 60.0
READ_ONLY = "clawgym_read_only"  # execution option: a read transaction (plain BEGIN on SQLite)


def store_url(url: str) -> URL:
    """Parses and checks a store URL; PostgreSQL always runs on psycopg 3."""
    try:
        u = make_url(url)
    except Exception as e:
        raise InvalidArgument(f"bad store URL {url!r}: {e}") from e
    backend = u.get_backend_name()
    if backend == "postgresql":
        if u.drivername not in ("postgresql", "postgresql+psycopg"):
            raise InvalidArgument(f"store URL {url!r}: use the psycopg 3 driver, postgresql+psycopg://…")
        return u.set(drivername="postgresql+psycopg")
    if backend == "sqlite":
        if u.database in (None, "", ":memory:") or (u.query.get("mode") == "memory"):
            raise InvalidArgument(
                f"store URL {url!r}: SQLite must be a file (sqlite:///path.db), shared by all threads"
            )
        return u
    raise InvalidArgument(f"store URL {url!r}: the store runs on postgresql+psycopg:// or sqlite:///")


def create_store_engine(url: str, pool_size: int = 16) -> Engine:
    """An engine for `url`, with pool and per-connection settings for the backend."""
    u = store_url(url)
    if u.get_backend_name() == "sqlite":
        engine = create_engine(
            u,
            pool_size=pool_size,
            max_overflow=0,
            pool_timeout=SQLITE_BUSY_TIMEOUT_S,
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S, "check_same_thread": False},
        )
        event.listen(engine, "connect", _sqlite_connect)
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    return create_engine(u, pool_size=pool_size, max_overflow=max(2, pool_size // 4), pool_pre_ping=True)


def read_only(engine: Engine) -> Engine:
    """The same pool for reads: one snapshot per transaction, taking no write lock.

    PostgreSQL reads run REPEATABLE READ, so a multi-query read (a whole group) sees one
    snapshot; SQLite gets a deferred BEGIN, whose WAL snapshot is fixed at the first read.
    """
    if engine.dialect.name == "postgresql":
        return engine.execution_options(isolation_level="REPEATABLE READ")
    return engine.execution_options(**{READ_ONLY: True})


def _sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    # isolation_level=None: pysqlite stops issuing its own BEGINs, so `_sqlite_begin` decides.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")  # a call is durable when record_call returns
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _sqlite_begin(conn: Any) -> None:
    conn.exec_driver_sql("BEGIN" if conn.get_execution_options().get(READ_ONLY) else "BEGIN IMMEDIATE")
