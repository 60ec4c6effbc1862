"""One log format for every line a poolwatch process writes, its own and uvicorn's: text by
default, JSON on request (``--log-format json``, ``POOLWATCH_LOG_FORMAT=json``).

Text::

    2026-12-05T01:02:03.456Z INFO poolwatch.sidecar event=state_file_write_recovered path=/tmp/a.json

JSON, one object per line (the stdlib's ``logging`` with :class:`JsonFormatter`; no extra
dependency)::

    {"time": "2026-12-05T01:02:03.456Z", "level": "INFO", "logger": "poolwatch.sidecar",
     "message": "event=state_file_write_recovered path=/tmp/a.json", "event": "state_file_write_recovered"}

``event`` is the first ``event=NAME`` field of a message (the sidecar logs state changes as
``key=value`` fields); an exception's traceback is ``exception``.  uvicorn's own loggers get no
handler of their own and propagate (:data:`UVICORN_LOG_CONFIG`), so their lines take the same format.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from typing import Any, TextIO

__all__ = ["FORMATS", "UVICORN_LOG_CONFIG", "JsonFormatter", "TextFormatter", "configure"]

FORMATS = ("text", "json")
_EVENT = re.compile(r"(?:^|\s)event=(\S+)")
# uvicorn's loggers, which get no handler of their own, propagate to the root logger and its handler
# (uvicorn.Config(log_config=...)). Incremental: levels and propagation only, so applying it closes no
# handler another part of the process (a test runner's capture) installed.
UVICORN_LOG_CONFIG: dict[str, Any] = {
    "version": 1,
    "incremental": True,
    "loggers": {name: {"propagate": True} for name in ("uvicorn", "uvicorn.error")},
}


def _utc(record: logging.LogRecord) -> str:
    whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{whole}.{int(record.msecs):03d}Z"


class TextFormatter(logging.Formatter):
    """``TIME LEVEL LOGGER MESSAGE``, the time in UTC with milliseconds."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{_utc(record)} {record.levelname} {record.name} {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``time``, ``level``, ``logger``, ``message``, and ``event`` and
    ``exception`` when there are."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        doc: dict[str, str] = {
            "time": _utc(record),
            "level": record.levelname,
            "logger": record.name,
            "message": message,
        }
        event = _EVENT.search(message)
        if event is not None:
            doc["event"] = event[1]
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False)


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """The root handler :func:`configure` installs (and replaces when called again)."""


def configure(level: str, fmt: str = "text", stream: TextIO | None = None) -> logging.Handler:
    """Send every logger's records (the root's handler) to ``stream`` (stderr) in format ``fmt``
    at ``level``; replaces the handler an earlier call installed (no other), quiets httpx.
    Returns the handler."""
    handler = _Handler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _Handler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    logging.getLogger("httpx").setLevel(logging.WARNING)
    return handler
