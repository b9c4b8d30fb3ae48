"""The body parser (pydantic-core, else the stdlib) answers exactly as the stdlib: values and errors."""

import json
import math

import pytest

from clawgym.errors import InvalidArgument
from clawgym.proxy.gateway import parse_body, parse_body_stdlib
from clawgym.store.validate import EncodedJSON, encoded_json_object

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


def outcome(parse, body: bytes) -> tuple[str, str]:
    try:
        return "ok", repr(parse(body))
    except InvalidArgument as e:
        return "refused", str(e)


@pytest.mark.parametrize("body", BODIES, ids=range(len(BODIES)))
def test_the_parser_and_the_stdlib_agree(body):
    assert outcome(parse_body, body) == outcome(parse_body_stdlib, body)


def test_special_floats_keep_their_values():
    nan, inf, ninf, big, negzero, tiny = parse_body(BODIES[2])
    assert math.isnan(nan) and inf == big == math.inf and ninf == -math.inf
    assert math.copysign(1, negzero) == -1 and tiny == 0.0


def test_an_object_keeps_its_own_text_to_be_recorded_unless_the_store_must_refuse_it():
    body = b'{"messages": [{"role": "user", "content": "caf\xc3\xa9 \\u00e9"}], "n": 1e400, "a": 1, "a": 2}'
    parsed = parse_body(body)
    assert isinstance(parsed, EncodedJSON) and parsed.text == body.decode()
    assert (
        json.loads(parsed.text)
        == parsed
        == {"messages": [{"role": "user", "content": "café é"}], "n": math.inf, "a": 2}
    )
    assert encoded_json_object("request", parsed) is parsed, "the store takes it as checked"
    # NaN / Infinity: a plain value, so the store's own check refuses it as before
    for special in (b'{"x": NaN}', b'{"x": -Infinity}'):
        assert type(parse_body(special)) is dict
        with pytest.raises(InvalidArgument, match="not JSON-serialisable"):
            encoded_json_object("request", parse_body(special))
    assert type(parse_body_stdlib(b'{"u": 1}')) is dict, "the stdlib's value is re-encoded by the store"
    assert type(parse_body(b"[1, 2]")) is list
