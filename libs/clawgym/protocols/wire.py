"""What every wire protocol module provides, and the small pieces they share (SSE framing, log-once).

Owns the seam between the proxy core and the protocols: a protocol parses a request body into a
`WireRequest` (canonical conversation + options) and builds a per-call `Reply` that renders the
completion as JSON or as its SSE event stream, and typed errors in its own error shape. The
protocols hold no module-level state: "log an ignored field once" is an object per app.
"""

import json
import logging
import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from clawgym.errors import ClawgymError, InvalidArgument
from clawgym.protocols.conversation import Completion, Conversation, GenerationOptions, StreamItem

log = logging.getLogger("clawgym.protocols")

MAX_SHOWN_CHARS = 64  # a request's own strings (field names, tool types) quoted in logs and errors
MAX_NAMED_FIELDS = 8  # ignored fields named per request; the rest are counted
MAX_LOGGED_KEYS = 10_000  # distinct messages a LogOnce remembers (and logs) per app


def clip(text: str, limit: int = MAX_SHOWN_CHARS) -> str:
    """`text` cut to `limit` characters (with how much was cut), for logs and error messages."""
    return text if len(text) <= limit else f"{text[:limit]}…(+{len(text) - limit} chars)"


class WireModel(BaseModel):
    """Base of wire models: tolerant of fields we do not know (real clients send many)."""

    model_config = ConfigDict(extra="allow")


@dataclass
class WireRequest:
    """A parsed harness request: its canonical form and what the reply needs to echo."""

    conversation: Conversation
    options: GenerationOptions
    model: str
    wire: Any  # the protocol's own request model


class Reply(Protocol):
    """Builds one call's answer in the protocol's shape."""

    def new_tool_id(self) -> str: ...
    def response(self, completion: Completion) -> dict[str, Any]: ...
    def stream(self, items: AsyncIterator[StreamItem]) -> AsyncIterator[bytes]: ...


class WireProtocol(Protocol):
    name: str  # as recorded in `calls.protocol`

    def parse(self, body: Any) -> WireRequest: ...
    def reply(self, request: WireRequest, prompt_tokens: int, reused_tokens: int) -> Reply: ...
    def error_body(self, error: ClawgymError) -> dict[str, Any]: ...
    def stream_error(self, error: Exception) -> bytes: ...


def sse(data: dict[str, Any] | str, event: str | None = None) -> bytes:
    """One server-sent event; `data` is JSON-encoded unless it is a string already."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def validate(model: type[BaseModel], body: Any) -> Any:
    """Validates a wire body; pydantic's errors become one readable InvalidArgument (HTTP 400)."""
    try:
        return model.model_validate(body)
    except ValidationError as e:
        details = "; ".join(
            f"{clip('.'.join(str(p) for p in err['loc'])) or 'body'}: {clip(err['msg'], 200)}"
            for err in e.errors(include_input=False)[:5]
        )
        raise InvalidArgument(f"malformed request: {details}") from None
    except (RecursionError, ValueError, TypeError) as e:
        raise InvalidArgument(f"malformed request: {clip(str(e), 200)}") from None


class LogOnce:
    """Logs each distinct message once per app (ignored fields, dropped hosted tools).

    Keys and messages hold request strings, so callers `clip` those; this bounds what is kept
    (at most MAX_LOGGED_KEYS keys of bounded length) whatever a caller passes."""

    def __init__(self, logger: logging.Logger = log) -> None:
        self._seen: set[str] = set()
        self._log = logger

    def __call__(self, key: str, message: str) -> None:
        key = clip(key, 4 * MAX_SHOWN_CHARS)
        if key not in self._seen and len(self._seen) < MAX_LOGGED_KEYS:
            self._seen.add(key)
            self._log.info(clip(message, 8 * MAX_SHOWN_CHARS))


def ignored_fields(model: BaseModel, log_once: LogOnce, protocol: str, known_ignored: frozenset[str]) -> None:
    """Logs (once each) request fields that are not in the wire model and not known to be ignorable:
    the first MAX_NAMED_FIELDS by name (clipped), then how many more there were."""
    unknown = [name for name in model.model_extra or {} if name not in known_ignored]
    for name in unknown[:MAX_NAMED_FIELDS]:
        shown = clip(name)
        log_once(f"{protocol}:{shown}", f"{protocol}: field {shown!r} is present in the request but ignored")
    if len(unknown) > MAX_NAMED_FIELDS:
        log_once(
            f"{protocol}:+{len(unknown)}",
            f"{protocol}: {len(unknown) - MAX_NAMED_FIELDS} more unknown fields in one request are ignored",
        )


def new_id(prefix: str) -> Callable[[], str]:
    """An id factory: `prefix` + 24 random hex digits (no underscores after the prefix, see OpenClaw)."""
    return lambda: prefix + secrets.token_hex(12)
