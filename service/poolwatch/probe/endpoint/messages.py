"""One request head parsed, one response encoded: the probe endpoint's HTTP/1.1 framing, bounded.

A head is at most :data:`MAX_HEAD_BYTES` with :data:`MAX_HEADERS` header lines, a request line of
method, an absolute path and ``HTTP/1.1`` or ``HTTP/1.0``; anything else is a :class:`BadRequest`
(a 400).  A response is JSON with its length, ``Connection`` as the client and the route want it,
``Retry-After`` on a 503, and no body at all on a 304.  What is answered is
:mod:`poolwatch.probe.endpoint.routes`'.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from poolwatch.codec.renewal import NOT_MODIFIED

__all__ = ["MAX_HEADERS", "MAX_HEAD_BYTES", "BadRequest", "Request", "Response", "parse_head"]

MAX_HEAD_BYTES = 8192
MAX_HEADERS = 48
_REASONS = {200: "OK", 304: "Not Modified", 400: "Bad Request", 403: "Forbidden", 404: "Not Found",
            405: "Method Not Allowed", 413: "Content Too Large", 503: "Service Unavailable"}  # fmt: skip


class BadRequest(ValueError):
    """A request head that is not a small, well-formed HTTP/1.x head."""


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    keep_alive: bool
    peer: str = ""
    trusted: bool = False  # the I/O thread verified its signature (a nonce is good for one check)


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    doc: Any  # a JSON-ready value, or bytes already encoded (a 304 has none)
    close: bool = False
    headers: tuple[tuple[str, str], ...] = ()

    def encode(self, keep_alive: bool) -> bytes:
        body = self.doc if isinstance(self.doc, bytes) else json.dumps(self.doc).encode()
        connection = "keep-alive" if keep_alive and not self.close else "close"
        extra = "".join(f"{name}: {value}\r\n" for name, value in self.headers)
        if self.status == 503:
            extra += "Retry-After: 1\r\n"
        framing = f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        if self.status == NOT_MODIFIED:
            framing, body = "", b""  # no body, and no length of one
        head = (
            f"HTTP/1.1 {self.status} {_REASONS.get(self.status, 'Error')}\r\n{framing}"
            f"Connection: {connection}\r\n{extra}Server: poolwatch-probe\r\n\r\n"
        )
        return head.encode("ascii") + body


def parse_head(raw: bytes, peer: str = "") -> Request:
    """One request head (without the blank line); raises :class:`BadRequest`."""
    if len(raw) > MAX_HEAD_BYTES:
        raise BadRequest("request head too large")
    lines = raw.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.1", "HTTP/1.0") or not parts[1].startswith("/"):
        raise BadRequest("malformed request line")
    if len(lines) - 1 > MAX_HEADERS:
        raise BadRequest("too many headers")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise BadRequest("malformed header line")
        headers[name.lower()] = value.strip()
    token = headers.get("connection", "").lower()
    keep_alive = token != "close" if parts[2] == "HTTP/1.1" else token == "keep-alive"
    path, _, query = parts[1].partition("?")
    return Request(parts[0], path, query, headers, keep_alive, peer)
