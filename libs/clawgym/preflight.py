"""Checks a process runs before it loads any model: each refusal one line that names what to change.

`preflight(cfg, ...)` checks what the caller says it will open, cheapest first: the model specs
(`policy_spec`: names and folders, no weights), the suites, the ports it will listen on (a bind
test on each, SO_REUSEADDR as the servers bind), then the store (SQLite: the file's folder exists
and is writable; PostgreSQL: one connection) and the Redis URLs (a PING), each network check
bounded by `CONNECT_TIMEOUT_S`. The app commands call it before building their runtime, each
`clawgym serve X` before building its server, so a bad config is refused in about a second instead
of after the torch import and the model load.

Not here: opening any part (`clawgym.assemble`); what changes between the check and the open (a
port taken in between, a database stopped) still fails there, as before.
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from clawgym.config import env_name
from clawgym.errors import ClawgymError, FailedPrecondition, InvalidArgument, Unavailable

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

    from clawgym.config import ClawgymConfig

# Long enough for a database across a network, short enough that a refusal still comes early.
CONNECT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Listen:
    """A port this process will listen on, and how its user chooses another."""

    host: str
    port: int  # 0: any free port, nothing to check
    name: str  # as the refusal names it: "port", "store.metrics_port"
    change: str  # how to choose another: "--port", "--metrics-port, --set store.metrics_port=N or …"
    shared: bool = False  # bound with SO_REUSEPORT (the proxy's reuse_port): replicas share it

    @classmethod
    def of(cls, cfg: ClawgymConfig, section: str, field: str, *, shared: bool = False) -> Listen:
        """A port field of `clawgym serve <section>`'s own section, on the section's host: changed with its
        flag (`--metrics-port`), `--set` or its CLAWGYM_* variable."""
        s = getattr(cfg, section)
        key = f"{section}.{field}"
        change = f"--{field.replace('_', '-')}, --set {key}=N or {env_name(key)}"
        return cls(s.host, getattr(s, field), key, change, shared)


def preflight(
    cfg: ClawgymConfig,
    *,
    models: Sequence[str] = (),
    suites: Sequence[str] = (),
    listens: Sequence[Listen] = (),
    store: Literal["", "open_store", "open_sql_store"] = "",
    buses: Sequence[str] = (),
    timeout_s: float = CONNECT_TIMEOUT_S,
) -> None:
    """Refuses (a ClawgymError naming the key or flag to change) what this process could not open.

    models, suites, buses: dotted config keys (`trainer.model`, `trainer.suite`, `proxy.redis_url`);
    an empty suite or bus URL is skipped. store: the store as that `clawgym.assemble` function opens it
    (`open_store`: nothing to check when `store.grpc_url` names the service; `open_sql_store`: the
    database of `store.url` and the bus of `store.bus_url`, as the store service does)."""
    for key in models:
        check_model(_value(cfg, key), key)
    for key in suites:
        if name := _value(cfg, key):
            check_suite(name, key)
    for listen in dict.fromkeys(listens):
        check_port(listen)
    if store == "open_sql_store" or (store == "open_store" and not cfg.store.grpc_url):
        check_store_url(cfg.store.url, "store.url", timeout_s)
        buses = ("store.bus_url", *buses)  # the in-process store's own bus
    for key in dict.fromkeys(buses):
        check_bus(_value(cfg, key), key, timeout_s)


def _value(cfg: ClawgymConfig, key: str) -> Any:
    node: Any = cfg
    for part in key.split("."):
        node = getattr(node, part)
    return node


# --- model, suite ---


def check_model(spec: str, key: str) -> None:
    """A policy spec clawgym can load: a built-in name or a local Hugging Face folder (no weights read)."""
    from clawgym.policies.specs import BUILTIN, policy_spec

    if not spec:
        raise InvalidArgument(
            f"{key}: missing; name the policy ({', '.join(sorted(BUILTIN))} or a local HF folder)"
        )
    try:
        policy_spec(spec)
    except InvalidArgument as e:
        raise InvalidArgument(f"{key}: {e}") from None


def check_suite(name: str, key: str) -> None:
    """A suite that resolves: bundled, imported, or a folder."""
    from clawgym.tasks.suites import resolve_suite

    try:
        resolve_suite(name)
    except ClawgymError as e:
        raise type(e)(f"{key}: {e}") from None


# --- ports ---


def check_port(listen: Listen) -> None:
    """Binds `listen`'s host:port for a moment, as its server will (SO_REUSEADDR: a port in TIME_WAIT
    after the last run is free; SO_REUSEPORT only where the server shares it)."""
    if not listen.port:
        return
    host = listen.host.strip("[]")  # gRPC spells IPv6 [::]
    where = f"{listen.name} {listen.port} on {listen.host or '*'}"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host or None, listen.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as e:
        raise InvalidArgument(
            f"{where}: cannot listen, the address does not resolve ({e.strerror})"
        ) from None
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if listen.shared:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            sock.bind(address)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise FailedPrecondition(f"{where} is in use: choose another with {listen.change}") from None
            raise FailedPrecondition(
                f"{where}: cannot listen ({e.strerror}): choose another with {listen.change}"
            ) from None


# --- store and bus ---


def check_store_url(url: str, key: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """A store URL the store can open: parsed as the store parses it, then the SQLite file's folder or
    one connection to PostgreSQL."""
    from clawgym.store.database import store_url

    try:
        u = store_url(url)
    except InvalidArgument as e:
        raise InvalidArgument(f"{key}: {e}") from None
    if u.get_backend_name() == "sqlite":
        if not u.query.get("uri"):  # a file: URI names its file in SQLite's own syntax; opening checks it
            check_sqlite_file(Path(u.database or ""), key)
    else:
        check_postgres(u, key, timeout_s)


def check_sqlite_file(path: Path, key: str) -> None:
    """The SQLite file can be written, or created: its folder is (or can be made, as the store makes
    it) a writable folder, since SQLite writes its -wal and -shm files beside it."""
    path = path.expanduser().absolute()
    if path.is_dir():
        raise InvalidArgument(f"{key}: {path} is a folder, not an SQLite file: fix {key}")
    if path.exists() and not os.access(path, os.R_OK | os.W_OK):
        raise InvalidArgument(f"{key}: cannot write the SQLite file {path} (permission denied): fix {key}")
    folder = path.parent
    while not folder.exists():  # the nearest folder that exists decides whether the rest can be made
        folder = folder.parent
    if not folder.is_dir():
        raise InvalidArgument(f"{key}: cannot create {path}: {folder} is not a folder: fix {key}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InvalidArgument(f"{key}: cannot create {path}: {folder} is not writable: fix {key}")


def check_postgres(u: URL, key: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """One connection (at most `timeout_s` to connect), as the store would make it."""
    from sqlalchemy import create_engine, exc, pool

    where = f"{u.host or 'localhost'}:{u.port or 5432}"
    # libpq takes whole seconds and treats less than 2 as 2
    engine = create_engine(
        u, poolclass=pool.NullPool, connect_args={"connect_timeout": max(2, round(timeout_s))}
    )
    try:
        with engine.connect():
            pass
    except exc.DBAPIError as e:
        reason = str(e.orig or e).strip().splitlines()[0]
        raise Unavailable(f"cannot reach PostgreSQL at {where} ({reason}): start it or fix {key}") from None
    finally:
        engine.dispose()


def check_bus(url: str, key: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """An event bus (or proxy live state) URL: memory:// needs nothing, Redis answers a PING."""
    from clawgym.store.bus import REDIS_SCHEMES, make_bus, split_prefix

    if not url:
        return
    base, _ = split_prefix(url)
    scheme = urlsplit(base).scheme
    if scheme == "memory":
        return
    if scheme not in REDIS_SCHEMES:
        try:
            make_bus(url)  # refuses it, in the bus's own words
        except InvalidArgument as e:
            raise InvalidArgument(f"{key}: {e}") from None
    check_redis(base, key, timeout_s)


def check_redis(url: str, key: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Redis at `url` answers a PING within `timeout_s` (its password, if the URL carries one, accepted)."""
    import redis

    parts = urlsplit(url)
    where = parts.path if parts.scheme == "unix" else f"{parts.hostname or 'localhost'}:{parts.port or 6379}"
    client = redis.Redis.from_url(url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s)
    try:
        client.ping()
    except redis.RedisError as e:
        raise Unavailable(f"cannot reach Redis at {where} ({e}): start it or fix {key}") from None
    finally:
        client.close()
