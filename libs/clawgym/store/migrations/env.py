"""Alembic environment of the trajectory store: runs the versions/ scripts against `Base.metadata`.

Not run by hand: `clawgym.store.migrations.migrate(url)` drives it and hands over an open
connection (`config.attributes["connection"]`); a bare `alembic` CLI run uses `sqlalchemy.url`.
"""

from alembic import context
from sqlalchemy import Connection, create_engine, pool

from clawgym.store.models import Base

config = context.config
target_metadata = Base.metadata


def run_on(connection: Connection) -> None:
    # render_as_batch: SQLite cannot ALTER most things, so later migrations copy-and-swap tables there.
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_offline() -> None:
    """Prints the SQL instead of running it (`alembic upgrade head --sql`)."""
    context.configure(
        url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata, literal_binds=True
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_offline()
elif (given := config.attributes.get("connection")) is not None:
    run_on(given)
else:
    engine = create_engine(config.get_main_option("sqlalchemy.url") or "", poolclass=pool.NullPool)
    with engine.connect() as conn:
        run_on(conn)
    engine.dispose()
