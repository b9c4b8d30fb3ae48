"""What the store accepts: checks of names, ids, JSON payloads, token arrays and sizes.

Owns turning caller input into column values or an `InvalidArgument` that says which field is
wrong and why; not existence checks (NotFound) or uniqueness (AlreadyExists), which need the
database (`clawgym.store.sql`). Everything here runs before a transaction opens, so a rejected
request never touches the database.
"""

import json
import math
from collections.abc import Sequence
from typing import Any

from clawgym import arrays
from clawgym.errors import InvalidArgument
from clawgym.records import FINISH_REASONS, PROTOCOLS, Call, Judgment

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
DEFAULT_MAX_CALL_BYTES = 64 * 2**20


def name(field: str, value: Any, allowed: Sequence[str]) -> str:
    """A value from a fixed vocabulary (status, protocol, finish reason)."""
    if value not in allowed:
        raise InvalidArgument(f"{field} must be one of {', '.join(allowed)}; got {value!r}")
    return str(value)


def text(field: str, value: Any, *, required: bool = True) -> str:
    """A string field; `required` ones must be non-empty."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{field} must be a string, got {type(value).__name__}")
    if required and not value:
        raise InvalidArgument(f"{field} must not be empty")
    if "\x00" in value:  # PostgreSQL text cannot hold NUL
        raise InvalidArgument(f"{field} must not contain NUL characters")
    return value


def integer(field: str, value: Any, low: int = 0, high: int = INT64_MAX) -> int:
    """An int in [low, high] (bools are not ints here)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{field} must be an integer, got {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidArgument(f"{field} must be in [{low}, {high}], got {value}")
    return value


def number(field: str, value: Any, *, optional: bool = False) -> float | None:
    """A finite float (ints accepted); None only where `optional`."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidArgument(f"{field} must be a finite number, got {value!r}")
    return float(value)


class EncodedJSON(dict):
    """A checked JSON object with its encoding (`text`): a call's request is ~100 kB, which the
    PostgreSQL fast path then sends as is instead of encoding it a second time. The proxy builds
    one from the request body it parsed (its own text, no NaN or Infinity), so a request is never
    encoded at all; `encoded_json_object` takes one as already checked."""

    __slots__ = ("text",)

    def __init__(self, value: dict[str, Any], text: str) -> None:
        super().__init__(value)
        self.text = text


def json_object(field: str, value: Any) -> tuple[dict[str, Any], int]:
    """A JSON-serialisable dict (no NaN: PostgreSQL's JSON has none) and its encoded size in bytes."""
    checked = encoded_json_object(field, value)
    return ({} if value is None else value), len(checked.text)


def encoded_json_object(field: str, value: Any) -> EncodedJSON:
    """`json_object`'s check, keeping the encoding."""
    if isinstance(value, EncodedJSON):
        return value
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise InvalidArgument(f"{field} must be a JSON object (dict), got {type(value).__name__}")
    try:
        encoded = json.dumps(value, allow_nan=False, separators=(",", ":"))  # ASCII: len is the size
    except (TypeError, ValueError) as e:
        raise InvalidArgument(f"{field} is not JSON-serialisable: {e}") from e
    return EncodedJSON(value, encoded)


def timings(value: Any) -> dict[str, float]:
    """Rollout phase durations: {"harness_s": 12.5, …}."""
    checked, _ = json_object("timings", value)
    return {text("timings key", k): number(f"timings[{k!r}]", v) for k, v in checked.items()}  # type: ignore[misc]


def judgment_values(j: Judgment) -> dict[str, Any]:
    """The judgments row of a `Judgment` (InvalidArgument for a bad field)."""
    prompt = j.prompt
    if not isinstance(prompt, list):
        raise InvalidArgument(f"prompt must be a list of messages, got {type(prompt).__name__}")
    json_object("prompt", {"messages": prompt})
    rule_scores, _ = json_object("rule_scores", j.rule_scores)
    score = number("score", j.score, optional=True)
    if score is not None and not 0.0 <= score <= 1.0:
        raise InvalidArgument(f"score must be in [0, 1], got {score}")
    return {
        "rollout_id": text("rollout_id", j.rollout_id),
        "model": text("model", j.model, required=False),
        "base_url": text("base_url", j.base_url, required=False),
        "prompt": prompt,
        "raw_answer": text("raw_answer", j.raw_answer, required=False),
        "score": score,
        "rule_scores": {
            text("rule name", k): number(f"rule_scores[{k!r}]", v) for k, v in rule_scores.items()
        },
        "error": text("error", j.error, required=False),
        "latency_s": number("latency_s", j.latency_s),
        "attempts": integer("attempts", j.attempts),
        "code_score": number("code_score", j.code_score, optional=True),
    }


def call_values(call: Call, max_bytes: int = DEFAULT_MAX_CALL_BYTES) -> dict[str, Any]:
    """The `calls` columns for `call` (all but id and created_at), or InvalidArgument naming the field.

    Arrays must be 1-D; ids and versions integers that fit int32, logprobs floats, and the output
    arrays (ids, logprobs, versions) one entry per generated token. The whole call, packed arrays
    plus JSON, must be at most `max_bytes`.
    """
    where = f"call {call.rollout_id!r}#{call.seq!r}"
    text("rollout_id", call.rollout_id)
    seq = integer("seq", call.seq, 0, INT32_MAX)
    protocol = name("protocol", call.protocol, PROTOCOLS)
    finish_reason = name("finish_reason", call.finish_reason, FINISH_REASONS)
    policy_version = integer("policy_version", call.policy_version)
    latency = number("latency_s", call.latency_s)
    temperature = number("temperature", call.temperature, optional=True)
    if temperature is not None and temperature < 0:
        raise InvalidArgument(f"{where}: temperature must be >= 0, got {temperature}")
    request = encoded_json_object("request", call.request)
    response = encoded_json_object("response", call.response)
    headers = encoded_json_object("headers", call.headers)
    packed = {}
    for field, pack in (
        ("prompt_ids", arrays.pack_ids),
        ("output_ids", arrays.pack_ids),
        ("output_logprobs", arrays.pack_logprobs),
        ("output_versions", arrays.pack_ids),
    ):
        try:
            packed[field] = pack(getattr(call, field))
        except (ValueError, TypeError) as e:  # ArrayError, or numpy refusing a ragged/odd input
            raise InvalidArgument(f"{where}: {field}: {e}") from e
    n_output = len(packed["output_ids"]) // 4
    for field in ("output_logprobs", "output_versions"):
        if len(packed[field]) // 4 != n_output:
            raise InvalidArgument(
                f"{where}: {field} has {len(packed[field]) // 4} entries for {n_output} output ids"
            )
    size = sum(map(len, packed.values())) + len(request.text) + len(response.text) + len(headers.text)
    if size > max_bytes:
        raise InvalidArgument(
            f"{where} is {size} bytes, over the store's limit of {max_bytes} bytes per call"
        )
    return {
        "rollout_id": call.rollout_id,
        "seq": seq,
        "protocol": protocol,
        "request": request,
        "response": response,
        "headers": headers,
        **packed,
        "n_prompt": len(packed["prompt_ids"]) // 4,
        "n_output": n_output,
        "policy_version": policy_version,
        "finish_reason": finish_reason,
        "latency_s": latency,
        "temperature": temperature,
    }
