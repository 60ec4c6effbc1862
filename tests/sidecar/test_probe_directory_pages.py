"""The sidecar pages by itself when it refuses its probe directory or a probe, or loses the
directory (issue 42): before, only a Prometheus rule said so, and a sidecar's own webhook heard
nothing; a directory refused from the start (a non-root engine's) raised nothing at all."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from tests.helpers import FakeClock

from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.probe_directory import DirectoryHealth, ProbeDirectoryHealth
from poolwatch.detect.schema import AlertName, Severity
from poolwatch.settings.sidecar import Settings
from poolwatch.sidecar.app import create_app

FAMILY = ProbeDirectoryHealth(DetectorConfig())


def test_a_directory_lost_as_unsafe_pages_at_once_and_one_gone_after_a_minute() -> None:
    (unsafe,) = FAMILY.signals(DirectoryHealth("/run/poolwatch", lost="unsafe"), 0.0)
    (missing,) = FAMILY.signals(DirectoryHealth("/run/poolwatch", lost="missing"), 0.0)
    assert (unsafe.alert, unsafe.severity, unsafe.for_seconds) == (
        AlertName.PROBE_DIRECTORY_LOST,
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
    signals = FAMILY.signals(DirectoryHealth("/run/poolwatch", refused=refused), 0.0)
    assert sorted(s.labels for s in signals) == [(("reason", "forged"),), (("reason", "unsafe"),)]
    (unsafe,) = [s for s in signals if s.labels == (("reason", "unsafe"),)]
    assert "owned by uid 1000" in unsafe.description
    assert "run the sidecar as that same user" in unsafe.description
    assert FAMILY.signals(DirectoryHealth("/run/poolwatch"), 0.0) == []
    assert FAMILY.signals(None, 0.0) == []


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
