"""PostgreSQL's binary formats of the `calls` columns: the parameters of `pg_prepared`'s statement.

Owns turning a call's column values (`validate.call_values` plus its id) into one binary
parameter per column, and their type oids; not the statement or its connection (`pg_prepared`).

Why: `record_call` encodes its own row in its caller's thread, while the batch ahead of it is
being written, so the leader of the next batch adapts nothing (where psycopg's list dumping used
to run), and the packed token arrays go to libpq as the very bytes `validate` made (no copy).
The formats are PostgreSQL's `*send`/`*recv` ones, network byte order: int4, int8, float8, text
and varchar (UTF-8), json (its text), bytea (raw); NULL is None.
"""

import json
import struct
from collections.abc import Callable
from typing import Any

from sqlalchemy import JSON, BigInteger, Double, Integer, LargeBinary, String, Text
from sqlalchemy.types import TypeEngine

from clawgym.store.models import CallRow
from clawgym.store.validate import EncodedJSON

_INT4, _INT8, FLOAT8 = struct.Struct(">i"), struct.Struct(">q"), struct.Struct(">d")
TEXT_ARRAY_OID = 1009


def _text(value: str) -> bytes:
    return value.encode()


def _json(value: Any) -> bytes:
    if isinstance(value, EncodedJSON):  # checked and encoded once already (a call's ~100 kB request)
        return value.text.encode()
    return json.dumps(value).encode()  # what SQLAlchemy's JSON type sends


# SQLAlchemy type → (PostgreSQL type oid, encoder); subclasses before their bases.
_TYPES: list[tuple[type[TypeEngine[Any]], int, Callable[[Any], bytes]]] = [
    (Text, 25, _text),
    (String, 1043, _text),  # varchar
    (BigInteger, 20, _INT8.pack),
    (Integer, 23, _INT4.pack),
    (Double, 701, FLOAT8.pack),
    (LargeBinary, 17, bytes),  # the packed arrays are bytes already: no copy
    (JSON, 114, _json),
]


def _column_type(column_type: TypeEngine[Any]) -> tuple[int, Callable[[Any], bytes]]:
    for base, oid, encode in _TYPES:
        if isinstance(column_type, base):
            return oid, encode
    raise TypeError(f"no binary encoding for column type {column_type!r}")  # a new model type: add it here


COLUMNS = [c.name for c in CallRow.__table__.columns]
_ENCODERS = [_column_type(c.type) for c in CallRow.__table__.columns]
OIDS = [oid for oid, _ in _ENCODERS]
CREATED_AT = COLUMNS.index("created_at")  # set per batch, by its leader


def encode_row(values: dict[str, Any]) -> tuple[bytes | None, ...]:
    """One call's parameters, one per column of `COLUMNS`; created_at's is b"" (the batch sets it)."""
    return tuple(
        b"" if i == CREATED_AT else None if values[name] is None else encode(values[name])
        for i, (name, (_, encode)) in enumerate(zip(COLUMNS, _ENCODERS, strict=True))
    )


def text_array(values: list[str]) -> bytes:
    """A 1-D `text[]` in binary: (ndim, has nulls, element oid, length, lower bound), then each
    element's length and bytes."""
    data = [v.encode() for v in values]
    header = struct.pack(">iiiii", 1, 0, 25, len(data), 1)
    return header + b"".join(_INT4.pack(len(d)) + d for d in data)
