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
            f"{'.'.join(str(p) for p in err['loc']) or 'body'}: {err['msg']}" for err in e.errors()[:5]
        )
        raise InvalidArgument(f"malformed request: {details}") from None
    except (RecursionError, ValueError, TypeError) as e:
        raise InvalidArgument(f"malformed request: {e}") from None


class LogOnce:
    """Logs each distinct message once per app (ignored fields, dropped hosted tools)."""

    def __init__(self, logger: logging.Logger = log) -> None:
        self._seen: set[str] = set()
        self._log = logger

    def __call__(self, key: str, message: str) -> None:
        if key not in self._seen and len(self._seen) < 10_000:
            self._seen.add(key)
            self._log.info(message)


def ignored_fields(model: BaseModel, log_once: LogOnce, protocol: str, known_ignored: frozenset[str]) -> None:
    """Logs (once each) request fields that are not in the wire model and not known to be ignorable."""
    for name in model.model_extra or {}:
        if name not in known_ignored:
            log_once(
                f"{protocol}:{name}", f"{protocol}: field {name!r} is present in the request but ignored"
            )


def new_id(prefix: str) -> Callable[[], str]:
    """An id factory: `prefix` + 24 random hex digits (no underscores after the prefix, see OpenClaw)."""
    return lambda: prefix + secrets.token_hex(12)
