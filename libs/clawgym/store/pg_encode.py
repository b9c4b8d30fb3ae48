"""PostgreSQL's binary array format for the `calls` columns: the parameters of `pg_prepared`'s statement.

Owns encoding a call's column values (`validate.call_values` plus its id) into one binary array
element per column, and joining a batch's elements into one `col[]` parameter per column; not the
statement or its connection (`pg_prepared`).

Why encode per call: `record_call` encodes its own row in its caller's thread, while the batch
ahead of it is being written, so the leader of the next batch only joins bytes (no per-row
adaptation on the critical path, where psycopg's list dumping used to run). The formats are
PostgreSQL's `*send`/`*recv` ones (network byte order): int4, int8, float8, text, varchar, json
(its text), bytea (raw); an array is (ndim, has-nulls, element oid, length, lower bound) and
each element is its length (-1: NULL) then its bytes.
"""

import json
import struct
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import JSON, BigInteger, Double, Integer, LargeBinary, String, Text
from sqlalchemy.types import TypeEngine

from clawgym.store.models import CallRow

NULL = struct.pack(">i", -1)  # an element's length when it is NULL

_LENGTH = struct.Struct(">i")
_INT4 = struct.Struct(">ii")  # length 4, value
_INT8 = struct.Struct(">iq")
_FLOAT8 = struct.Struct(">id")
_HEADER = struct.Struct(">iiiii")  # ndim, has nulls, element oid, length, lower bound


def _text(value: str) -> bytes:
    data = value.encode()
    return _LENGTH.pack(len(data)) + data


def _json(value: Any) -> bytes:
    return _text(json.dumps(value))  # what SQLAlchemy's JSON type sends


def _bytea(value: bytes) -> bytes:
    return _LENGTH.pack(len(value)) + value


# SQLAlchemy type → (element oid, array oid, element encoder); subclasses before their bases.
_TYPES: list[tuple[type[TypeEngine[Any]], int, int, Callable[[Any], bytes]]] = [
    (Text, 25, 1009, _text),
    (String, 1043, 1015, _text),
    (BigInteger, 20, 1016, lambda v: _INT8.pack(8, v)),
    (Integer, 23, 1007, lambda v: _INT4.pack(4, v)),
    (Double, 701, 1022, lambda v: _FLOAT8.pack(8, v)),
    (LargeBinary, 17, 1001, _bytea),
    (JSON, 114, 199, _json),
]


def _column_type(column_type: TypeEngine[Any]) -> tuple[int, int, Callable[[Any], bytes]]:
    for base, element_oid, array_oid, encode in _TYPES:
        if isinstance(column_type, base):
            return element_oid, array_oid, encode
    raise TypeError(f"no binary encoding for column type {column_type!r}")  # a new model type: add it here


COLUMNS = [c.name for c in CallRow.__table__.columns]
_ENCODERS = [_column_type(c.type) for c in CallRow.__table__.columns]
ELEMENT_OIDS = [oid for oid, _, _ in _ENCODERS]
ARRAY_OIDS = [oid for _, oid, _ in _ENCODERS]
CREATED_AT = COLUMNS.index("created_at")  # set per batch, by the leader
TEXT_ARRAY_OID = 1009


def encode_row(values: dict[str, Any]) -> tuple[bytes, ...]:
    """One call's elements, one per column of `COLUMNS` (created_at's left empty: the batch sets it)."""
    return tuple(
        b"" if i == CREATED_AT else NULL if values[name] is None else encode(values[name])
        for i, (name, (_, _, encode)) in enumerate(zip(COLUMNS, _ENCODERS, strict=True))
    )


def array(element_oid: int, elements: Sequence[bytes]) -> bytes:
    """A 1-D binary array of already encoded elements."""
    has_nulls = any(e == NULL for e in elements)
    return _HEADER.pack(1, has_nulls, element_oid, len(elements), 1) + b"".join(elements)


def text_array(values: Sequence[str]) -> bytes:
    return array(25, [_text(v) for v in values])


def batch_arrays(rows: Sequence[tuple[bytes, ...]], created_at: float) -> list[bytes]:
    """One array parameter per column of `COLUMNS`, the rows in the given order."""
    stamp = _FLOAT8.pack(8, created_at)
    return [
        array(oid, [stamp] * len(rows) if i == CREATED_AT else [row[i] for row in rows])
        for i, oid in enumerate(ELEMENT_OIDS)
    ]
