"""How deeply a request's JSON may nest (`proxy.max_json_depth`), checked before anything recurses.

Owns the depth check of a request: its parsed body, and the tool-call arguments it carries as
JSON text (OpenAI `arguments` strings), which rendering parses again. The stdlib parser takes
~1000 levels, but escaping, canonical forms and the chat template all recurse over these values:
500 levels overflowed them (HTTP 500, a traceback per request). Both checks walk level by level in a
loop, and a value with no more brackets than the limit, which cannot nest deeper, is not walked.
"""

import functools
import json
from typing import Any

from clawgym.errors import InvalidArgument
from clawgym.protocols.conversation import Conversation


def deeper_than(value: Any, limit: int) -> bool:
    """True when lists and dicts in `value` nest more than `limit` levels (`[]` is one level).
    Level by level, no recursion; below the top, only exact dicts and lists count, which is all a
    JSON parser builds (an exact type test is cheaper than isinstance)."""
    if not isinstance(value, dict | list):
        return False
    level = [value.values() if isinstance(value, dict) else value]
    for _ in range(limit):
        level = [
            c.values() if type(c) is dict else c
            for children in level
            for c in children
            if type(c) is dict or type(c) is list
        ]
        if not level:
            return False
    return True


def _brackets(text: bytes | bytearray | str) -> int:
    """Opening brackets in JSON text, strings included: never fewer than its nesting depth."""
    if isinstance(text, str):
        return text.count("[") + text.count("{")
    return text.count(b"[") + text.count(b"{")


def check_body_depth(raw: bytes | bytearray, value: Any, limit: int) -> None:
    """InvalidArgument if the body parsed from `raw` nests deeper than `limit`."""
    if _brackets(raw) > limit and deeper_than(value, limit):
        raise InvalidArgument(f"request JSON is nested deeper than {limit} levels (proxy.max_json_depth)")


@functools.lru_cache(maxsize=1024)
def _arguments_too_deep(arguments: str, limit: int) -> bool:
    """Whether arguments text parses to JSON nested past `limit`; memoised, as a rollout resends its
    earlier tool calls with every call (text that is not JSON is rendered as it is: not too deep)."""
    try:
        return deeper_than(json.loads(arguments), limit)
    except ValueError:
        return False
    except RecursionError:
        return True


def check_arguments_depth(conv: Conversation, limit: int) -> None:
    """InvalidArgument if a tool call's arguments, JSON text, nest deeper than `limit` (or deeper
    than the JSON parser goes): rendering parses them and recurses over what it finds."""
    for message in conv.messages:
        for call in message.tool_calls:
            if _brackets(call.arguments) > limit and _arguments_too_deep(call.arguments, limit):
                raise InvalidArgument(
                    f"a tool call's arguments are nested deeper than {limit} levels (proxy.max_json_depth)"
                )
