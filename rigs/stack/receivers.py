"""Loopback receivers that record what Alertmanager sends: a webhook (Slack, PagerDuty and the
webhook receiver are all HTTP POSTs) and an SMTP server, each keeping every message with the wall
time it arrived."""

from __future__ import annotations

import json
import socketserver
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Mail", "Post", "SmtpRecorder", "WebhookRecorder"]


@dataclass(frozen=True)
class Post:
    """One webhook notification from Alertmanager and the wall time it arrived."""

    received_at: float
    body: dict[str, Any]
    path: str = "/"


@dataclass
class WebhookRecorder:
    """A tiny HTTP server on loopback that records every POSTed JSON body with its arrival time."""

    posts: list[Post] = field(default_factory=list)

    def __post_init__(self) -> None:
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                recorder.posts.append(Post(time.time(), body, self.path))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="webhook")
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/hook"

    def firing(self) -> list[tuple[float, dict[str, Any]]]:
        """(arrival time, alert) of every firing alert notified so far, in arrival order."""
        return [
            (post.received_at, alert)
            for post in list(self.posts)
            for alert in post.body.get("alerts", [])
            if alert.get("status") == "firing"
        ]

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


@dataclass(frozen=True)
class Mail:
    """One message an SMTP client handed over, and the wall time it arrived."""

    received_at: float
    sender: str
    recipients: tuple[str, ...]
    data: str


class SmtpRecorder:
    """A tiny SMTP server on loopback (no TLS, no auth) that records every message it is given:
    Alertmanager's email integration pointed at it with ``require_tls: false``."""

    def __init__(self) -> None:
        self.mails: list[Mail] = []
        recorder = self

        class Handler(socketserver.StreamRequestHandler):
            timeout = 10

            def reply(self, line: str) -> None:
                self.wfile.write(f"{line}\r\n".encode())

            def handle(self) -> None:
                sender, recipients = "", []
                self.reply("220 localhost poolwatch-test ESMTP")
                for _ in range(100):  # bounded: one message per connection is all Alertmanager sends
                    raw = self.rfile.readline()
                    if not raw:
                        return
                    verb = raw.decode(errors="replace").strip()
                    upper = verb.upper()
                    if upper.startswith(("EHLO", "HELO")):
                        self.reply("250 localhost")
                    elif upper.startswith("MAIL FROM:"):
                        sender = verb[10:].strip(" <>")
                        self.reply("250 OK")
                    elif upper.startswith("RCPT TO:"):
                        recipients.append(verb[8:].strip(" <>"))
                        self.reply("250 OK")
                    elif upper == "DATA":
                        self.reply("354 end with <CRLF>.<CRLF>")
                        lines = []
                        while (line := self.rfile.readline()) not in (b".\r\n", b".\n", b""):
                            lines.append(line.decode(errors="replace"))
                        data = "".join(lines)
                        recorder.mails.append(Mail(time.time(), sender, tuple(recipients), data))
                        self.reply("250 OK queued")
                    elif upper == "QUIT":
                        self.reply("221 bye")
                        return
                    else:
                        self.reply("250 OK")

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="smtp")
        self._thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
