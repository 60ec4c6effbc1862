"""The sidecar's long-poll of a probe endpoint, in a thread (stdlib only: runs inside a release venv,
and in the emulator's last-word test).

GET /v1/snapshot?wait=0.5&sig=<last seen> with the pod's secret, as poolwatch's probe source does;
every snapshot handed over is kept, in order.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.parse
from typing import Protocol

from poolwatch.codec.snapshot import parse_snapshot
from poolwatch.conservation import signature
from poolwatch.model.snapshot import Snapshot
from poolwatch.probe.core.last_word import ATTENDED_S


class Attended(Protocol):
    def attended(self, within: float) -> bool: ...


class LongPoll:
    def __init__(self, url: str, secret: str) -> None:
        parsed = urllib.parse.urlsplit(url)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 80
        self.headers = {"Authorization": f"Bearer {secret}"}
        self.snapshots: list[Snapshot] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sidecar-long-poll", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def wait_attended(self, publication: Attended | None, timeout: float = 10.0) -> bool:
        """Until the endpoint counts someone collecting (a long-poll blocked on it, or one served)."""
        deadline = time.monotonic() + timeout
        while publication is not None and time.monotonic() < deadline:
            if publication.attended(ATTENDED_S):
                return True
            time.sleep(0.01)
        return False

    def _run(self) -> None:
        sig = ""
        while not self._stop.is_set():
            conn = http.client.HTTPConnection(self.host, self.port, timeout=5.0)
            try:
                path = f"/v1/snapshot?wait=0.5&sig={urllib.parse.quote(sig)}"
                conn.request("GET", path, headers=self.headers)
                resp = conn.getresponse()
                body = resp.read()
            except OSError:
                return  # the rank is gone
            finally:
                conn.close()
            if resp.status == 200:
                snap = parse_snapshot(json.loads(body))
                self.snapshots.append(snap)
                sig = signature(snap)
