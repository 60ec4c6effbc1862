"""A fake sidecar surrounding for the alerting wiring tests: Alertmanager, settings, a ticking sleep."""

from __future__ import annotations

import asyncio
import json
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import httpx

from poolwatch.detect.config import DetectorConfig
from poolwatch.model.snapshot import Snapshot
from poolwatch.settings.groups import AlertSettings
from poolwatch.settings.sidecar import Settings
from poolwatch.sidecar.alerting import AlertWiring, build_alerting
from poolwatch.sidecar.store import SnapshotStore
from rigs.fakes.clock import FakeClock

DETECTION_FIELDS = {f.name for f in fields(DetectorConfig)}


class FakeAlertmanager:
    def __init__(self) -> None:
        self.posts: list[list[dict[str, Any]]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/v2/alerts"
        self.posts.append(json.loads(request.content))
        return httpx.Response(200)


def settings(tmp_path: Path, **values: Any) -> Settings:
    """Sidecar settings posting to a fake Alertmanager; ``values`` of the ``alerting`` and
    ``detection`` groups by field name."""
    group = AlertSettings(
        alertmanager_urls=("http://am.example:9093",), state_file=str(tmp_path / "alerts.json")
    )
    thresholds = {k: values.pop(k) for k in list(values) if k in DETECTION_FIELDS}
    return Settings(alerting=replace(group, **values), detection=DetectorConfig(**thresholds))


def seeded(clock: FakeClock, seed: Snapshot) -> tuple[SnapshotStore, Snapshot]:
    return SnapshotStore(), replace(seed, taken_at=clock.now)


def seen_seed(settings: Settings, clock: FakeClock, seed: Snapshot, **wiring: Any) -> AlertWiring:
    """The alerting wiring of ``settings`` (``wiring``: its transport, sleep, ...) over a store that
    has just taken ``seed``, as if taken now; not yet evaluated."""
    store, snap = seeded(clock, seed)
    alerting = build_alerting(settings, store, clock, **wiring)
    store.put(snap)
    return alerting


class Ticker:
    """An injected sleep: advances the fake clock, lets other tasks run, then parks after ``limit`` calls."""

    def __init__(self, clock: FakeClock, limit: int = 20) -> None:
        self.clock, self.limit, self.calls = clock, limit, 0

    async def __call__(self, seconds: float) -> None:
        self.calls += 1
        if self.calls > self.limit:
            await asyncio.Event().wait()  # until cancelled by stop()
        self.clock.advance(seconds)
        await asyncio.sleep(0)


async def settle(rounds: int = 50) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)
