"""SQLAlchemy engines for the trajectory store: one code path, PostgreSQL (psycopg 3) or SQLite.

Owns connection settings per backend; not the schema (`models`, `migrations`) or queries (`sql`).

- PostgreSQL: `postgresql+psycopg://…` (a bare `postgresql://` gets the psycopg 3 driver); a pool
  as large as the number of concurrent writers, so none waits for a connection.
- SQLite: a file (`sqlite:///path.db`), in WAL mode so readers never block the writer, with a
  busy timeout so concurrent writers queue instead of failing. Write transactions start with
  `BEGIN IMMEDIATE`: they take the write lock up front, so a read-then-write transaction can
  never deadlock on upgrading its lock (SQLite would answer SQLITE_BUSY at once). Reads use a
  plain deferred `BEGIN` through `read_only(engine)`.

A reading command's engine (`writable=False`) cannot write at all: SQLite opens the file with
`mode=ro` (a missing file is refused, never created), PostgreSQL sessions start with
`default_transaction_read_only=on`, so any write fails in the database itself.
"""

from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url

from clawgym.errors import InvalidArgument, NotFound, Unavailable

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


def store_label(url: str) -> str:
    """How errors name a store: a SQLite store's file, else its URL without the password."""
    u = store_url(url)
    if u.get_backend_name() == "sqlite" and not u.query.get("uri"):
        return str(Path(u.database or "").resolve())
    return u.render_as_string(hide_password=True)


def read_only_url(u: URL) -> URL:
    """`u` opened so that nothing can write: SQLite read-only (mode=ro; a missing file is NotFound,
    not created), PostgreSQL with every transaction read-only."""
    if u.get_backend_name() == "sqlite":
        if u.query.get("uri"):  # already a file: URI; SQLite refuses a missing file under mode=ro
            return u.update_query_dict({"mode": "ro"})
        path = Path(u.database or "").resolve()
        if not path.is_file():
            raise NotFound(f"no store at {path}")
        return u.set(database=path.as_uri()).update_query_dict({"mode": "ro", "uri": "true"})
    given = u.query.get("options", "")
    options = " ".join(given) if isinstance(given, tuple) else given
    return u.update_query_dict({"options": f"{options} -c default_transaction_read_only=on".strip()})


def create_store_engine(url: str, pool_size: int = 16, *, writable: bool = True) -> Engine:
    """An engine for `url`, with pool and per-connection settings for the backend; read-only unless
    `writable` (see `read_only_url`)."""
    u = store_url(url)
    if not writable:
        u = read_only_url(u)
    if u.get_backend_name() == "sqlite":
        if writable and not u.query.get("uri"):
            _make_folder(Path(u.database or "").parent)
        engine = create_engine(
            u,
            pool_size=pool_size,
            max_overflow=0,
            pool_timeout=SQLITE_BUSY_TIMEOUT_S,
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S, "check_same_thread": False},
        )
        event.listen(engine, "connect", _sqlite_connect if writable else _sqlite_connect_read_only)
        event.listen(engine, "begin", _sqlite_begin if writable else _sqlite_begin_read_only)
        return engine
    return create_engine(u, pool_size=pool_size, max_overflow=max(2, pool_size // 4), pool_pre_ping=True)


def _make_folder(folder: Path) -> None:
    """The SQLite file's folder: SQLite creates the file but not the folders above it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise Unavailable(f"store database unavailable: cannot create {folder}: {e.strerror}") from e


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


def _sqlite_connect_read_only(dbapi_connection: Any, _record: Any) -> None:
    # No pragmas: a read-only file takes none that write (journal_mode), a clawgym store is in WAL already.
    dbapi_connection.isolation_level = None


def _sqlite_begin_read_only(conn: Any) -> None:
    conn.exec_driver_sql("BEGIN")


def _sqlite_begin(conn: Any) -> None:
    conn.exec_driver_sql("BEGIN" if conn.get_execution_options().get(READ_ONLY) else "BEGIN IMMEDIATE")
