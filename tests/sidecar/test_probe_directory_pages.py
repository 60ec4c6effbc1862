"""The sidecar pages by itself when it refuses its probe directory or a probe, or loses the
directory (issue 42): before, only a Prometheus rule said so, and a sidecar's own webhook heard
nothing; a directory refused from the start (a non-root engine's) raised nothing at all."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from poolwatch.detect.alert import Signal
from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.families.probe_directory import (
    PROBE_DIRECTORY_LOST,
    ProbeDirectoryHealth,
)
from poolwatch.detect.family import Tick
from poolwatch.detect.schema import Severity
from poolwatch.settings.sidecar import Settings
from poolwatch.sidecar.app import create_app
from poolwatch.target_state import DirectoryHealth
from rigs.fakes.clock import FakeClock

JUDGE = ProbeDirectoryHealth(DetectorConfig())


def judged(health: DirectoryHealth | None) -> list[Signal] | None:
    return JUDGE.signals(Tick(0.0, directory=health))


def test_a_directory_lost_as_unsafe_pages_at_once_and_one_gone_after_a_minute() -> None:
    (unsafe,) = judged(DirectoryHealth("/run/poolwatch", lost="unsafe"))
    (missing,) = judged(DirectoryHealth("/run/poolwatch", lost="missing"))
    assert (unsafe.alert, unsafe.severity, unsafe.for_seconds) == (
        PROBE_DIRECTORY_LOST,
        Severity.CRITICAL,
        0.0,
    )
    assert (missing.severity, missing.for_seconds, missing.labels) == (
        Severity.WARNING,
        60.0,
        (("reason", "missing"),),
    )


def test_each_refusal_reason_is_one_alert_naming_what_and_why() -> None:
    refused = {
        "/run/poolwatch": "unsafe: /run/poolwatch: owned by uid 1000; refused (never adopted)",
        "w-dp0-tp0-pp0.final": "forged: bad signature",
    }
    signals = judged(DirectoryHealth("/run/poolwatch", refused=refused))
    assert sorted(s.labels for s in signals) == [(("reason", "forged"),), (("reason", "unsafe"),)]
    (unsafe,) = [s for s in signals if s.labels == (("reason", "unsafe"),)]
    assert "owned by uid 1000" in unsafe.description
    assert "run the sidecar as that same user" in unsafe.description
    assert judged(DirectoryHealth("/run/poolwatch")) == []
    assert judged(None) is None  # not judged this turn


async def test_a_sidecar_refusing_its_directory_pages_its_own_webhook(tmp_path: Path) -> None:
    node = tmp_path / "node"
    node.mkdir(mode=0o755)
    probe_dir = node / "probe"
    probe_dir.mkdir()
    probe_dir.chmod(0o777)  # anyone could write it: refused whole
    posts: list[dict[str, object]] = []

    def hook(request: httpx.Request) -> httpx.Response:
        posts.append(json.loads(request.content))
        return httpx.Response(200)

    settings = Settings.from_env(
        {
            "POOLWATCH_WORKER": "w",
            "POOLWATCH_PROBE_DIR": str(probe_dir),
            "POOLWATCH_WEBHOOK_URLS": "https://hooks.example/services/T0/B0/X",
        }
    )
    clock = FakeClock()
    app = create_app(settings, clock=clock, transport=httpx.MockTransport(hook))
    alerting = app.state.alerting
    await alerting.start()
    try:
        assert alerting.directory is not None
        alerting.directory.__self__.current()  # one discovery scan (the scrape loop's)
        alerting.evaluate()
        for deliverer in alerting._deliverers:
            await deliverer.deliver_once()
    finally:
        await alerting.stop()
    paged = [a for body in posts for a in body.get("alerts", [body])]  # type: ignore[attr-defined]
    names = {(a["labels"]["alertname"], a["labels"]["reason"]) for a in paged}
    assert names == {("PoolwatchProbeRefused", "unsafe")}
