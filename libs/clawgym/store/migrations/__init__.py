"""The store's Alembic migrations, shipped in the package, and `migrate(url)` which applies them.

Owns schema creation and upgrades: the store never calls `create_all`. The scripts live in
`versions/`; `env.py` runs them against `clawgym.store.models.Base.metadata`. To add one after
changing `models.py`:

    python -c "from clawgym.store.migrations import new_revision; new_revision('postgresql+psycopg://…', 'what changed')"

then read and fix the generated script (it must run on PostgreSQL and SQLite). A reading
command never migrates: `require_current` refuses a database that is not a store at the head.
"""

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, exc, inspect, text

from clawgym.errors import FailedPrecondition
from clawgym.store.database import create_store_engine

HERE = Path(__file__).resolve().parent


def alembic_config(url: str = "") -> Config:
    """An Alembic config pointing at this package's scripts (no alembic.ini needed)."""
    config = Config()
    config.set_main_option("script_location", str(HERE))
    if url:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))  # ConfigParser interpolation
    return config


def migrate(target: str | Engine, revision: str = "head") -> None:
    """Upgrades the schema at `target` (a store URL or engine) to `revision`, in one transaction.

    Concurrent migrators are serialised: on PostgreSQL by an advisory lock on the schema name,
    on SQLite by `BEGIN IMMEDIATE` (see `clawgym.store.database`).
    """
    engine = create_store_engine(target, pool_size=1) if isinstance(target, str) else target
    try:
        with engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(
                    text("SELECT pg_advisory_xact_lock(hashtext('clawgym.migrate.' || current_schema()))")
                )
            config = alembic_config()
            config.attributes["connection"] = conn
            command.upgrade(config, revision)
    finally:
        if isinstance(target, str):
            engine.dispose()


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at (None before the first migration)."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


# In every revision: an alembic_version table alone may be another application's.
CORE_TABLES = frozenset({"runs", "rollouts", "calls"})


def require_current(engine: Engine, label: str) -> None:
    """Refuses, in one line naming `label`, a database that is not a clawgym store at this package's
    head revision (a foreign or empty one, an older or a newer store); reads only.

    An older store is refused rather than read in part: its rows lack the columns the reads select,
    and upgrading it is a writing command's job (any that opens it, `clawgym serve store` or `train`).
    """
    from alembic.runtime.migration import MigrationContext

    try:
        with engine.connect() as conn:
            revision = MigrationContext.configure(conn).get_current_revision()
            tables = set(inspect(conn).get_table_names())
    except exc.OperationalError:
        raise  # unreachable or locked: the caller's Unavailable
    except exc.DatabaseError as e:  # e.g. SQLite: "file is not a database"
        raise FailedPrecondition(f"{label} is not a clawgym store: {e.orig or e}") from e
    if revision is None or not tables >= CORE_TABLES:
        raise FailedPrecondition(f"{label} is not a clawgym store (no clawgym tables); refusing to read it")
    head = head_revision()
    if revision == head:
        return
    from alembic.script import ScriptDirectory

    known = {s.revision for s in ScriptDirectory.from_config(alembic_config()).walk_revisions()}
    if revision in known:
        raise FailedPrecondition(
            f"{label} is a store at schema {revision}, older than this clawgym's {head}: "
            "a writing command (clawgym serve store, clawgym train) upgrades it"
        )
    raise FailedPrecondition(
        f"{label} is at schema {revision!r}, unknown to this clawgym (newest {head}): "
        "written by a newer clawgym, or not a clawgym store"
    )


def head_revision() -> str:
    """The newest revision shipped in this package."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "the package ships no migrations"
    return head


def new_revision(url: str, message: str) -> None:
    """Autogenerates a revision script in `versions/` from the diff of `url`'s schema and the models."""
    migrate(url)
    command.revision(alembic_config(url), message=message, autogenerate=True)
