"""The fast body parser (pydantic-core) answers exactly as the stdlib path did: values and errors."""

import math

import pytest

from clawgym.errors import InvalidArgument
from clawgym.proxy.gateway import parse_body

BODIES = [
    b'{"a": [1, 2.5, "x", null, true], "b": {"c": "\\u00e9\\ud83d\\ude00"}}',
    b'{"a": 1, "a": 2}',  # the last duplicate wins in both
    b"[NaN, Infinity, -Infinity, 1e400, -0.0, 1.5e-400]",  # the stdlib's extensions, kept
    b"[123456789012345678901234567890, -9223372036854775809, 18446744073709551615]",  # exact big ints
    b'"\\ud800"',  # lone surrogates: refused, with the stdlib path's message
    b'{"x": "\\udc00\\ud800"}',
    b'"\xed\xa0\x80"',  # a surrogate as UTF-8 bytes
    b"\xef\xbb\xbf{}",  # a UTF-8 BOM: the stdlib accepts it
    '{"u": "utf-16"}'.encode("utf-16"),  # so is UTF-16
    b"[" * 5000,  # too deep
    b'{"a": 1',
    b"",
    b'"a\x01"',
    b"{}x",
]


def outcome(body: bytes, fast: bool) -> tuple[str, str]:
    try:
        return "ok", repr(parse_body(body, fast))
    except InvalidArgument as e:
        return "refused", str(e)


@pytest.mark.parametrize("body", BODIES, ids=range(len(BODIES)))
def test_fast_and_stdlib_parsing_agree(body):
    assert outcome(body, True) == outcome(body, False)


def test_special_floats_keep_their_values():
    nan, inf, ninf, big, negzero, tiny = parse_body(BODIES[2])
    assert math.isnan(nan) and inf == big == math.inf and ninf == -math.inf
    assert math.copysign(1, negzero) == -1 and tiny == 0.0
