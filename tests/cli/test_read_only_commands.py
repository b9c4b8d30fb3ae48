"""`clawgym export` and `clawgym browse` only read: through the real CLI, a database that is missing,
not a clawgym store, or a store at an older schema is refused in one line and left as it was
(never migrated, never created), on SQLite and PostgreSQL."""

import sqlite3
from pathlib import Path

import pytest
import yaml
from sqlalchemy import create_engine, inspect, pool

from clawgym.store.migrations import current_revision, migrate

COMMANDS = ("export", "browse")


def read(clawgym, command: str, *args: str, port: int):
    """Runs the reading command; browse would serve on `port` had it opened the store (then: timeout)."""
    where = ("--out", "exported") if command == "export" else ("--port", str(port))
    return clawgym(command, *args, *where, timeout=60)


def refused_in_one_line(done, command: str, says: str) -> None:
    assert done.returncode == 2, f"exit {done.returncode}:\n{done.stdout}\n{done.stderr}"
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"clawgym {command}: "), f"one clear line:\n{done.stderr}"
    assert says in lines[0], lines[0]


def run_folder(tmp_path: Path, url: str) -> Path:
    """A run folder without its own clawgym.db whose config.yaml names `url` as its store."""
    folder = tmp_path / "runs" / "20260101-000000"
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump({"store": {"url": url}}))
    return folder


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.parametrize("command", COMMANDS)
def test_a_run_folder_naming_a_foreign_sqlite_file_leaves_it_byte_identical(
    clawgym, tmp_path: Path, free_port: int, command: str
) -> None:
    other = tmp_path / "data" / "notes.db"
    other.parent.mkdir()
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE notes (body TEXT)")
        db.execute("INSERT INTO notes VALUES ('mine')")
    db.close()
    before = files(other.parent)
    done = read(
        clawgym, command, "--run-dir", str(run_folder(tmp_path, f"sqlite:///{other}")), port=free_port
    )
    refused_in_one_line(done, command, f"{other} is not a clawgym store")
    assert files(other.parent) == before, "the unrelated database was written to (or got WAL files beside it)"


@pytest.mark.parametrize("command", COMMANDS)
def test_a_mistyped_sqlite_path_is_refused_and_not_created(
    clawgym, tmp_path: Path, free_port: int, command: str
) -> None:
    typo = tmp_path / "clawgmy.db"  # in a folder that exists: SQLite would create it
    done = read(clawgym, command, "--store", f"sqlite:///{typo}", port=free_port)
    refused_in_one_line(done, command, f"no store at {typo}")
    folder = run_folder(tmp_path, f"sqlite:///{typo}")
    refused_in_one_line(
        read(clawgym, command, "--run-dir", str(folder), port=free_port), command, "no store at"
    )
    assert not typo.exists(), "a reading command created the database it was given"


@pytest.mark.parametrize("command", COMMANDS)
def test_a_postgresql_schema_without_tables_is_refused_and_left_empty(
    clawgym, tmp_path: Path, free_port: int, pg_url: str, command: str
) -> None:
    done = read(clawgym, command, "--run-dir", str(run_folder(tmp_path, pg_url)), port=free_port)
    refused_in_one_line(done, command, "is not a clawgym store")
    engine = create_engine(pg_url, poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            assert inspect(conn).get_table_names() == [], "a reading command created tables in the schema"
    finally:
        engine.dispose()


def test_a_store_at_an_older_schema_is_refused_with_how_to_upgrade_it_and_not_migrated(
    clawgym, tmp_path: Path, free_port: int, store_url: str
) -> None:
    migrate(store_url, "0005")
    sqlite_file = Path(store_url.removeprefix("sqlite:///")) if store_url.startswith("sqlite") else None
    before = sqlite_file.read_bytes() if sqlite_file else b""
    for command in COMMANDS:
        done = read(clawgym, command, "--store", store_url, port=free_port)
        refused_in_one_line(done, command, "older than this clawgym's")
        assert "clawgym serve store" in done.stderr, "the line says which commands upgrade a store"
    engine = create_engine(store_url, poolclass=pool.NullPool)
    try:
        assert current_revision(engine) == "0005", "a reading command migrated the store"
    finally:
        engine.dispose()
    if sqlite_file:
        assert sqlite_file.read_bytes() == before
