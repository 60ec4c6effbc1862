"""A real Alertmanager (Debian's prometheus-alertmanager) on loopback receives poolwatch's alerts,
shows them, resolves them, and loses nothing through an outage in the middle."""

from __future__ import annotations

import os
import re
import selectors
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.detect.streams import RankStream, exact
from tests.helpers import SEED_DOUBLE_FREE_LABELS, free_port, require_tool

from poolwatch.detect.config import DetectorConfig, MixinConfig
from poolwatch.detect.detector import Detector
from poolwatch.model.rank import Phase, Pool
from poolwatch.notify.alertmanager import AlertmanagerReceiver
from poolwatch.notify.delivery import Deliverer
from poolwatch.notify.paths import DETAIL_LABEL
from poolwatch.sidecar.store import SnapshotStore
from rigs.fakes.clock import FakeClock

pytestmark = pytest.mark.e2e

CONFIG = """\
route:
  receiver: "null"
  group_wait: 1h
receivers:
  - name: "null"
"""


@dataclass
class Alertmanager:
    binary: str
    workdir: Path
    port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> None:
        """Start it and return once it says it listens (read from its log, no polling)."""
        (self.workdir / "am.yml").write_text(CONFIG)
        self.process = subprocess.Popen(
            [
                self.binary,
                f"--config.file={self.workdir / 'am.yml'}",
                f"--storage.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--cluster.listen-address=",
                "--log.level=info",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        assert self.process.stderr is not None
        log = b""
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(self.process.stderr, selectors.EVENT_READ)
            while b"Listening on" not in log:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left) or self.process.poll() is not None:
                    raise RuntimeError(f"alertmanager did not start: {log.decode(errors='replace')[-2000:]}")
                log += os.read(self.process.stderr.fileno(), 65536)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
            if self.process.stderr is not None:
                self.process.stderr.close()
            self.process = None

    def alerts(self) -> list[dict[str, Any]]:
        response = httpx.get(f"{self.url}/api/v2/alerts", timeout=5.0)
        response.raise_for_status()
        body: list[dict[str, Any]] = response.json()
        return body


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[Alertmanager]:
    am = Alertmanager(require_tool("prometheus-alertmanager"), tmp_path, free_port())
    try:
        am.start()
        yield am
    finally:
        am.stop()


def shown(am: Alertmanager) -> dict[tuple[str, str], dict[str, Any]]:
    return {(a["labels"]["alertname"], a["labels"].get("worker", "")): a for a in am.alerts()}


async def test_alertmanager_receives_shows_and_resolves_alerts_and_an_outage_loses_nothing(
    alertmanager: Alertmanager,
) -> None:
    clock = FakeClock(time.time())  # Alertmanager judges endsAt against its own wall clock
    store = SnapshotStore()
    thresholds = DetectorConfig(resolve_samples=1, resolve_hold=0.0)
    detector = Detector(MixinConfig(thresholds, runbook_base_url="https://runbooks.example/poolwatch"), clock)
    store.subscribe(detector.observe)
    prefill = RankStream(clock, step=0.0)
    decode = RankStream(clock, step=0.0, worker=replace(prefill.worker, worker="decode-0"))
    async with httpx.AsyncClient() as client:
        deliverer = Deliverer(
            AlertmanagerReceiver(alertmanager.url, resend_interval=60.0),
            client,
            detector.alerts,
            clock,
            resend_interval=60.0,
            backoff=(0.0, 0.0),
        )

        # a double free on prefill-0 pages at once
        store.put(prefill.next(exact(Pool.FULL, 0), exact(Pool.MAMBA, -1)))
        assert await deliverer.deliver_once() == 1
        [alert] = alertmanager.alerts()
        assert alert["status"]["state"] == "active"
        labels = dict(alert["labels"])
        assert re.fullmatch("[0-9a-f]{8}", labels.pop(DETAIL_LABEL))  # a digest of the cause
        assert labels == SEED_DOUBLE_FREE_LABELS
        assert (
            alert["annotations"]["runbook_url"] == "https://runbooks.example/poolwatch/PoolwatchDoubleFree.md"
        )
        assert "counts 1 slot twice" in alert["annotations"]["description"]

        # Alertmanager goes away; meanwhile a leak fires on decode-0 and the double free resolves
        alertmanager.stop()
        store.put(decode.next(exact(Pool.FULL, 3), phase=Phase.IDLE))
        store.put(prefill.next())
        assert await deliverer.deliver_once() == 0
        assert await deliverer.deliver_once() == 0
        assert deliverer.stats().counts["failed"] >= 2
        assert deliverer.stats().queued == 2

        # it comes back empty (alerts live in memory): everything is told again at once
        alertmanager.start()
        assert alertmanager.alerts() == []
        assert await deliverer.deliver_once() == 2
        after = shown(alertmanager)
        assert set(after) == {("PoolwatchSlotLeak", "decode-0")}
        assert after["PoolwatchSlotLeak", "decode-0"]["labels"]["pool"] == "full"

        # the leak ends too: Alertmanager resolves it
        store.put(decode.next())
        assert await deliverer.deliver_once() == 1
        assert alertmanager.alerts() == []
        assert deliverer.stats().queued == 0


async def test_a_firing_alert_is_restored_in_alertmanager_after_a_restart(alertmanager: Alertmanager) -> None:
    clock = FakeClock(time.time())
    store = SnapshotStore()
    detector = Detector(DetectorConfig(), clock)
    store.subscribe(detector.observe)
    store.put(RankStream(clock, step=0.0).next(gap=-2))
    async with httpx.AsyncClient() as client:
        deliverer = Deliverer(
            AlertmanagerReceiver(alertmanager.url, 60.0), client, detector.alerts, clock, backoff=(0.0, 0.0)
        )
        assert await deliverer.deliver_once() == 1
        alertmanager.stop()
        alertmanager.start()
        assert alertmanager.alerts() == []
        assert await deliverer.deliver_once() == 0  # no attempt failed, so it waits for the re-send
        clock.advance(60)
        assert await deliverer.deliver_once() == 1
        assert [a["labels"]["alertname"] for a in alertmanager.alerts()] == ["PoolwatchDoubleFree"]
