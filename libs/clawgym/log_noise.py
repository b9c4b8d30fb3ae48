"""Log records that repeat per request or per call, demoted to DEBUG: health checks and metric scrapes
(GET /healthz, /metrics answered 2xx) as httpx clients and uvicorn's access log report them, and the
proxy's acknowledgement of each recorded call (`clawgym.proxy.acks`).

At INFO a run's log then holds its steps, evaluations, checkpoints and warnings, not a health check
per rollout (the orchestrator's proxy check) and an acknowledgement per call, which outnumbered them.
At DEBUG they are all there, marked DEBUG. A probe that failed
(no 2xx answer) stays at its level: that one says something.

Owns which records are routine; not where logs go (`clawgym_app.logs`, the services' mains).
"""

from __future__ import annotations

import logging
import re
from urllib.parse import urlsplit

PROBE_PATHS = frozenset({"/healthz", "/metrics"})
ACKS = "clawgym.proxy.acks"  # one line per call the store acknowledged (`proxy.generation`)
# the request line of each logger that reports HTTP requests: method, target (a path or a URL), status
_REQUEST_LINES = {
    "httpx": re.compile(r'^HTTP Request: (?P<method>\S+) (?P<target>\S+) "\S+ (?P<status>\d{3})'),
    "uvicorn.access": re.compile(r'"(?P<method>\S+) (?P<target>\S+) HTTP/[\d.]+" (?P<status>\d{3})$'),
}
PROBE_LOGGERS = tuple(_REQUEST_LINES)
ROUTINE_LOGGERS = (*PROBE_LOGGERS, ACKS)


def is_routine(record: logging.LogRecord) -> bool:
    """A call acknowledgement, or a 2xx answer to GET/HEAD /healthz or /metrics."""
    if record.name == ACKS:
        return True
    pattern = _REQUEST_LINES.get(record.name)
    match = pattern.search(record.getMessage()) if pattern is not None else None
    if match is None:
        return False
    path = urlsplit(match["target"]).path
    return match["method"] in ("GET", "HEAD") and path in PROBE_PATHS and match["status"].startswith("2")


class DemoteRoutine(logging.Filter):
    """On a logger: turns its routine records into DEBUG records, dropped unless it logs DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not is_routine(record):
            return True
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


_DEMOTE = DemoteRoutine()  # stateless; one instance, so installing it twice adds it once


def demote_routine(loggers: tuple[str, ...] = ROUTINE_LOGGERS) -> None:
    """Installs the filter on these loggers (a filter sees only its own logger's records)."""
    for name in loggers:
        logging.getLogger(name).addFilter(_DEMOTE)
