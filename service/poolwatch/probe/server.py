"""The probe's loopback HTTP endpoint, served by one daemon thread (stdlib ``http.server``).

=====================  ========================================================================
``GET /v1/snapshot``   the latest snapshot (``poolwatch.snapshot`` JSON); 503 before the first.
                       ``?sig=S&wait=W`` long-polls: the answer comes as soon as the latest
                       snapshot's :func:`~poolwatch.conservation.signature` differs from ``S``
                       (a pool's balance changed, a tripwire appeared), else after ``W`` seconds
                       (at most 30), so an alert reaches the sidecar within one sample.
``GET /v1/census``     the last census detail (``poolwatch.census`` JSON); 404 before the first
``GET /healthz``       ``{"ok": true, "disabled": ...}``
``POST /v1/disable``   the runtime kill switch: the probe stops sampling (``/v1/enable`` undoes)
=====================  ========================================================================

The server only reads the two references the scheduler thread swaps; serialisation happens
here, off the scheduler thread.  It binds 127.0.0.1 only.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qs

from poolwatch.codec import dump_snapshot
from poolwatch.conservation import signature
from poolwatch.model import Snapshot

MAX_WAIT_S = 30.0
POLL_S = 0.01  # the watch loop re-reads the reference the scheduler thread swaps; no lock taken

__all__ = ["ProbeServer", "Servable"]


def watch(probe: Servable, query: str) -> Snapshot | None:
    """The latest snapshot, once its signature differs from ``sig`` or ``wait`` has passed.

    Raises ``ValueError`` for a malformed ``wait``."""
    params = parse_qs(query)
    wait = min(max(float(params.get("wait", ["0"])[0]), 0.0), MAX_WAIT_S)
    seen = params.get("sig", [""])[0]
    deadline = time.monotonic() + wait
    while True:
        snap = probe.latest
        if (snap is not None and signature(snap) != seen) or time.monotonic() >= deadline:
            return snap
        time.sleep(POLL_S)


class Servable(Protocol):
    latest: Snapshot | None
    census: dict[str, Any] | None

    @property
    def disabled(self) -> bool: ...

    def disable(self) -> None: ...

    def enable(self) -> None: ...


def _handler(probe: Servable) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "poolwatch-probe"

        def do_GET(self) -> None:
            path, _, query = self.path.partition("?")
            if path == "/v1/snapshot":
                try:
                    snap = watch(probe, query)
                except ValueError:
                    self._send(400, {"error": "wait must be a number of seconds"})
                    return
                if snap is None:
                    self._send(503, {"error": "no snapshot yet"})
                else:
                    self._send(200, dump_snapshot(snap))
            elif path == "/v1/census":
                census = probe.census
                self._send(200, census) if census is not None else self._send(404, {"error": "no census yet"})
            elif path == "/healthz":
                self._send(200, {"ok": True, "disabled": probe.disabled})
            else:
                self._send(404, {"error": f"no such path {path!r}"})

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/v1/disable":
                probe.disable()
            elif path == "/v1/enable":
                probe.enable()
            else:
                self._send(404, {"error": f"no such path {path!r}"})
                return
            self._send(200, {"disabled": probe.disabled})

        def _send(self, status: int, doc: Any) -> None:
            body = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return None

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up mid-answer (a sidecar restarting, a cancelled long-poll) is
        routine; anything else is still reported, but never reaches the scheduler thread."""
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError):
            return
        super().handle_error(request, client_address)


class ProbeServer:
    """Serve ``probe`` on 127.0.0.1:``port`` (0 = any free port) from a daemon thread."""

    def __init__(self, probe: Servable, port: int = 0, host: str = "127.0.0.1") -> None:
        self._httpd = _Server((host, port), _handler(probe))
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="poolwatch-probe-http", daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> str:
        self._thread.start()
        return self.url

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
