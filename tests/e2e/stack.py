"""The pieces of the end-to-end stack: subprocesses stopped by pid, a webhook recorder, the
Prometheus and Alertmanager configurations, and polling with a deadline (never a fixed wait).

Everything binds 127.0.0.1 on ports chosen here; each process writes its output to a log file in
the test's directory, whose tail is shown when a wait runs out.
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import socket
import socketserver
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import httpx
import yaml
from tests.helpers import require_tool

T = TypeVar("T")


_HANDED: set[int] = set()  # every port this process handed out: never twice (issue 34, below)


def free_port() -> int:
    """A port nobody listens on now, for a server the caller starts soon after.  It is drawn below
    the kernel's ephemeral range, so no outgoing connection of another process (a benchmark's
    thousand clients) can take it in between, as one the OS picks with ``bind(0)`` could; and it
    is never one this process handed out before (for a server not started yet, it is free too):
    two sidecars given one port made one answer for both pods, and a page named prefill-1's
    worker with decode-0's pod (issue 34's cold CI run)."""
    return free_ports(1)


def free_ports(n: int) -> int:
    """The first of ``n`` consecutive ports, each as :func:`free_port` would hand it out."""
    low = ephemeral_low()
    for _ in range(400):
        base = random.randrange(max(1024, low - 12000), low - n)
        block = range(base, base + n)
        if _HANDED.intersection(block):
            continue
        with contextlib.ExitStack() as held:
            try:
                for port in block:
                    held.enter_context(socket.socket()).bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED.update(block)
        return base
    raise AssertionError(f"no {n} consecutive free ports below the ephemeral range")


def ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux; IANA's 49152 elsewhere)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 49152


def poll(
    probe: Callable[[], T | None], *, timeout: float, what: str, every: float = 0.2, logs: Sequence[Path] = ()
) -> T:
    """Call ``probe`` until it returns something other than None; fail naming ``what`` (and the
    tails of ``logs``) when ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() >= deadline:
            tails = "\n".join(f"--- {p.name}:\n{tail(p)}" for p in logs)
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{tails}")
        pause.wait(every)


def tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"({exc})"


def http_ok(url: str) -> bool | None:
    """True once ``url`` answers 2xx (None while it does not)."""
    try:
        return True if httpx.get(url, timeout=2.0).is_success else None
    except httpx.HTTPError:
        return None


@dataclass
class Process:
    """One subprocess with its output in ``log``; :meth:`stop` ends it by pid, SIGKILL as a last resort."""

    name: str
    argv: list[str]
    log: Path
    stop_signal: int = signal.SIGTERM
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        with self.log.open("wb") as out:
            self.popen = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT)
        return self

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        self.popen.send_signal(self.stop_signal)
        try:
            self.popen.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout=15)


def run_alertmanager(cleanup: contextlib.ExitStack, directory: Path, config: str) -> tuple[str, Process]:
    """A real Alertmanager with ``config`` on a loopback port (its files in ``directory``), stopped by
    ``cleanup``: its URL once ready, and its process."""
    port = free_port()
    (directory / "am.yml").write_text(config)
    argv = [
        require_tool("prometheus-alertmanager"),
        f"--config.file={directory / 'am.yml'}",
        f"--storage.path={directory / 'am'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",  # else its gossip binds 0.0.0.0:9094
    ]
    process = Process("alertmanager", argv, directory / "am.log")
    cleanup.callback(process.stop)
    process.start()
    url = f"http://127.0.0.1:{port}"
    poll(lambda: http_ok(f"{url}/-/ready"), timeout=30, what="Alertmanager", logs=[process.log])
    return url, process


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


def alertmanager_config(webhook_url: str) -> str:
    """Every alert to the webhook, each alone (``group_by: [...]``) and at once: the project's
    routing waits 10 s and groups for 5 m, which would hide the second path's alert."""
    doc = {
        "route": {
            "receiver": "hook",
            "group_by": ["..."],
            "group_wait": "1s",
            "group_interval": "1s",
            "repeat_interval": "1h",
        },
        "receivers": [{"name": "hook", "webhook_configs": [{"url": webhook_url, "send_resolved": True}]}],
    }
    return yaml.safe_dump(doc, sort_keys=False)


@dataclass(frozen=True)
class Scraped:
    """A sidecar Prometheus scrapes, with the labels a PodMonitor would give it."""

    port: int
    pod: str
    namespace: str


def prometheus_config(sidecars: Sequence[Scraped], alertmanager_port: int, rules: Path) -> str:
    """Scrape every sidecar each second, evaluate the generated rules each second, alert to AM."""
    doc = {
        "global": {
            "scrape_interval": "1s",
            "scrape_timeout": "1s",
            "evaluation_interval": "1s",
            # Prometheus adds these to the alerts it sends (not to its series): the test can tell
            # its copy from the sidecar's, which otherwise carries the very same labels
            "external_labels": {"prometheus": "e2e"},
        },
        "rule_files": [str(rules)],
        "alerting": {
            "alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{alertmanager_port}"]}]}]
        },
        "scrape_configs": [
            {
                "job_name": "poolwatch",
                "static_configs": [
                    {
                        "targets": [f"127.0.0.1:{s.port}"],
                        "labels": {"namespace": s.namespace, "pod": s.pod, "container": "poolwatch"},
                    }
                    for s in sidecars
                ],
            }
        ],
    }
    return yaml.safe_dump(doc, sort_keys=False)


@dataclass(frozen=True)
class Prometheus:
    """The query API of a running Prometheus."""

    url: str

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr} if at is None else {"query": expr, "time": f"{at:.3f}"}
        response = httpx.get(f"{self.url}/api/v1/query", params=params, timeout=10.0)
        body: dict[str, Any] = response.json()
        if body.get("status") != "success":
            raise AssertionError(f"Prometheus rejected {expr!r}: {body.get('error')}")
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def label_values(self, label: str, match: str, start: float, end: float) -> list[str]:
        params = {"match[]": match, "start": f"{start:.3f}", "end": f"{end:.3f}"}
        response = httpx.get(f"{self.url}/api/v1/label/{label}/values", params=params, timeout=10.0)
        body: dict[str, Any] = response.json()
        if body.get("status") != "success":
            raise AssertionError(f"Prometheus rejected label_values({match}, {label}): {body.get('error')}")
        values: list[str] = body["data"]
        return values


class LogWatcher:
    """Notes the wall time a line containing ``marker`` first appears in each of ``logs`` (read
    every 50 ms on a thread), e.g. when an emulated worker logs its crash."""

    def __init__(self, logs: dict[str, Path], marker: str) -> None:
        self.logs = logs
        self.marker = marker
        self.seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="log-watcher")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            for name, path in self.logs.items():
                if name not in self.seen and self._contains(path):
                    self.seen[name] = time.time()

    def _contains(self, path: Path) -> bool:
        try:
            return self.marker in path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return False

    def stop(self) -> None:
        self._stop.set()
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
