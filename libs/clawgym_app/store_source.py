"""Which store a reading command (`clawgym export`, `clawgym browse`) opens: a SQL URL, the store
service, or a run folder's own SQLite store (`runs/<ts>/clawgym.db`, else its config.yaml's store.url).

Only opens, and read-only: a SQL store is never migrated nor created by a reading command, and a
missing, foreign or older database is refused in one line (`SqlStore(writable=False)`). The
commands read through the `TrajectoryStore` interface and close it.
"""

from collections.abc import Sequence
from pathlib import Path

from clawgym.errors import InvalidArgument
from clawgym.report.run_folder import CONFIG_FILE, STORE_FILE, folder_store_url
from clawgym.store.interface import TrajectoryStore


def run_dir_store_url(folder: Path) -> str:
    """The store URL of a run folder: its clawgym.db, else the store.url its config.yaml names."""
    url = folder_store_url(folder)
    if not url:
        raise InvalidArgument(
            f"{folder} holds no {STORE_FILE} and no store.url in {CONFIG_FILE}: not a run folder"
        )
    return url


def open_read_store(
    store: str = "", store_service: str = "", run_dir: Path | None = None, sets: Sequence[str] = ()
) -> TrajectoryStore:
    """Exactly one of a SQLAlchemy URL, the store service's HOST:PORT (with the config's rpc secret) or a
    run folder; `sets` (`--set` items) over the rest of the config (CLAWGYM_* variables, defaults)."""
    from clawgym.assemble import open_store
    from clawgym.config import load_config

    given = [bool(store), bool(store_service), run_dir is not None]
    if sum(given) != 1:
        raise InvalidArgument("name one store: --store.url URL, --store.grpc-url HOST:PORT or --run-dir DIR")
    flags = (
        {"grpc_url": store_service} if store_service else {"url": store or run_dir_store_url(Path(run_dir))}
    )
    return open_store(load_config(flags={"store": flags}, sets=sets), writable=False)
