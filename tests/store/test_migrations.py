"""The schema comes from the shipped Alembic migrations, and they match the SQLAlchemy models; a
read-only store never migrates."""

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from clawgym.errors import NotFound
from clawgym.store.database import create_store_engine
from clawgym.store.migrations import current_revision, head_revision, migrate
from clawgym.store.models import Base
from clawgym.store.sql import SqlStore


def test_migrations_build_exactly_the_models_schema(store_url: str) -> None:
    """Upgrading an empty database to head gives the models' tables, indexes and types: no autogenerate diff."""
    migrate(store_url)
    engine = create_store_engine(store_url, pool_size=1)
    try:
        assert current_revision(engine) == head_revision(), (
            "migrate() must upgrade to the newest shipped revision"
        )
        with engine.connect() as conn:
            diff = compare_metadata(
                MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata
            )
            tables = set(inspect(conn).get_table_names())
    finally:
        engine.dispose()
    assert diff == [], f"models.py and migrations/versions disagree; add a migration: {diff}"
    assert {"runs", "groups", "rollouts", "calls", "checkpoints", "train_steps", "evals"} <= tables, (
        f"the migrations must create every table of the data model, got {sorted(tables)}"
    )


def test_opening_a_store_twice_keeps_the_schema_and_the_data(store_url: str) -> None:
    """A second SqlStore on the same database finds it at head and changes nothing."""
    first = SqlStore(store_url)
    run = first.create_run("kept")
    first.close()
    second = SqlStore(store_url)
    try:
        assert second.get_run(run.id) == run, "re-opening a store must keep what was written"
    finally:
        second.close()


def test_postgresql_keeps_the_packed_arrays_uncompressed(pg_url: str) -> None:
    """Migration 0006: the calls' array columns are STORAGE EXTERNAL (no pglz attempt on every
    80 kB prompt), the other columns keep PostgreSQL's defaults."""
    migrate(pg_url)
    engine = create_store_engine(pg_url, pool_size=1)
    try:
        with engine.connect() as conn:
            storage = dict(
                conn.execute(
                    text(
                        "SELECT attname, attstorage FROM pg_attribute"
                        " WHERE attrelid = 'calls'::regclass AND attnum > 0 AND NOT attisdropped"
                    )
                ).all()
            )
    finally:
        engine.dispose()
    arrays = ("prompt_ids", "output_ids", "output_logprobs", "output_versions")
    assert {c: storage[c] for c in arrays} == dict.fromkeys(arrays, "e"), storage
    assert storage["request"] == "x" and storage["seq"] == "p", "only the array columns change"


def test_a_read_only_store_reads_what_was_written_and_the_database_refuses_its_writes(store_url: str) -> None:
    """SqlStore(writable=False), the reading commands' store: the same reads, on a connection where a
    write fails in the database itself; a SQLite store's file stays byte for byte as it was."""
    writer = SqlStore(store_url)
    run = writer.create_run("kept", {"kind": "test"})
    writer.close()
    sqlite_file = Path(store_url.removeprefix("sqlite:///")) if store_url.startswith("sqlite") else None
    before = sqlite_file.read_bytes() if sqlite_file else b""
    reader = SqlStore(store_url, writable=False)
    try:
        assert reader.list_runs() == [run] and reader.get_run(run.id) == run, "a read-only store reads as usual"
        with pytest.raises(Exception, match=r"read-only|readonly"):
            reader.create_run("written")
    finally:
        reader.close()
    if sqlite_file:
        assert sqlite_file.read_bytes() == before, "reading changed the store's file"
    check = SqlStore(store_url)
    try:
        assert [r.id for r in check.list_runs()] == [run.id], "the refused write left nothing behind"
    finally:
        check.close()


def test_a_writable_sqlite_store_makes_the_folder_its_file_is_in(tmp_path: Path) -> None:
    """SQLite creates a missing file but not its folder: the store makes the folder (what
    `clawgym.preflight` lets through as a folder that can be made), a read-only store never does."""
    db = tmp_path / "runs" / "new" / "clawgym.db"
    store = SqlStore(f"sqlite:///{db}")
    try:
        run = store.create_run("in a new folder")
        assert store.get_run(run.id) == run, "the store in the folder it made keeps what was written"
    finally:
        store.close()
    assert db.is_file(), "the store's file is in the folder it made"
    elsewhere = tmp_path / "other" / "clawgym.db"
    with pytest.raises(NotFound):
        SqlStore(f"sqlite:///{elsewhere}", writable=False)
    assert not elsewhere.parent.exists(), "a read-only store makes nothing"
