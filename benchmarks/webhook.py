"""A loopback webhook receiver for the benchmarks: records when each firing alert arrived."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Webhook:
    """Records ``(clock(), labels)`` of every POSTed firing alert; serves on 127.0.0.1 only."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.firing: list[tuple[float, dict[str, str]]] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                stamp = clock()
                hook.firing += [(stamp, a["labels"]) for a in body["alerts"] if a["status"] == "firing"]
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def first(self, alert: str, worker: str) -> float | None:
        """When the first firing ``alert`` of ``worker`` arrived (None: never)."""
        for stamp, labels in self.firing:
            if labels.get("alertname") == alert and labels.get("worker") == worker:
                return stamp
        return None
