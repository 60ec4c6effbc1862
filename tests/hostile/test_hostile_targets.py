"""The hostile-target suite (issue 16): one sidecar, one good control probe, and beside it one
hostile target, file or client per attack.  For every attack the control keeps being scraped,
``/metrics`` and the alert API keep answering, the control's alert is delivered, memory stays
under the manifest's limit (256 MiB), and the failure is visible as a
scrape-error reason, a skipped-file reason or a self-metric.  The fast test runs every attack at a
small size; the slow one at full size (100,000 queue names, a 90,000-rank page, 200,000-deep
nesting) with tracemalloc measuring the peak.

Everything is in-process: targets answer through ``httpx.MockTransport`` (their URLs are loopback
addresses no socket is opened for), the sidecar is driven through its ASGI app, time is a fake
clock.  The probe's endpoint and the sidecar's own server under hostile *clients* are covered over
real loopback sockets by ``tests/probe/core/test_probe_server_limits.py`` and
``tests/commands/test_serve_limits.py``; the scheduler's steps/s with 200 hostile long-polling
clients is ``benchmarks/bench_hostile.py``.
"""

from __future__ import annotations

import json
import os
import tracemalloc
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from poolwatch.codec.snapshot import dump_snapshot
from poolwatch.discovery.entry import DiscoveryEntry, write_discovery
from poolwatch.model.snapshot import ProbeHealth, Snapshot
from poolwatch.notify.alertmanager import AlertmanagerReceiver
from poolwatch.notify.delivery import Deliverer
from poolwatch.notify.webhook import WebhookReceiver
from poolwatch.settings.sidecar import Settings
from poolwatch.sidecar.alerting import build_alerting
from poolwatch.sidecar.app import create_app
from poolwatch.sidecar.scraper import Scraper
from poolwatch.sidecar.store import SnapshotStore
from poolwatch.sources.targets import TargetSet
from rigs.fakes.clock import FakeClock

MEMORY_LIMIT = 256 << 20  # deploy/kubernetes: the sidecar container's memory limit
ROUNDS = 12
STEP_S = 10.0  # fake seconds per round: past the kill switch's 1 m and the 60 s re-send
HOOK = "http://127.0.0.1:9099/hook"
AM = "http://127.0.0.1:9093"

# name -> (discovery port, payload maker, the reason the sidecar must give for it)
Payload = Callable[[dict[str, Any]], bytes]


def _json(doc: object) -> bytes:
    return json.dumps(doc).encode()


def _with(path: tuple[str, ...], value: object) -> Payload:
    def make(doc: dict[str, Any]) -> bytes:
        node = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        return _json(doc)

    return make


HOSTILE_PROBES: dict[str, tuple[int, Payload, str]] = {
    "surrogate": (40002, _with(("worker", "worker"), "pod-\ud800"), "schema"),  # item 1
    "bigseq": (40003, _with(("seq",), 10**400), "schema"),  # item 1
    "queues": (40004, _with(("queues",), {f"q{i}": 1 for i in range(100)}), "schema"),  # item 3
    "negative": (40005, _with(("pools", "mamba", "available"), -5), "schema"),  # item 10
    "nan-time": (40006, lambda doc: json.dumps({**doc, "taken_at": float("nan")}).encode(), "schema"),
    "garbage": (40007, lambda doc: b"\xff\xfe not json", "decode"),
}
HEAVY_PROBES: dict[str, tuple[int, Payload, str]] = {  # the same attacks at full size (slow tier)
    "queues": (40004, _with(("queues",), {f"q{i}": 1 for i in range(100_000)}), "schema"),  # 3.4 GB before
    "deep": (40008, lambda doc: b"[" * 200_000 + b"]" * 200_000, "decode"),
}
DISABLED_PORT = 40009  # item 7: a probe whose kill switch is on (a pool-less heartbeat)
HOSTILE_PAGES = {  # item 3 and item 11: SGLang /metrics pages
    "http://127.0.0.1:30001": "".join(f'sglang:num_running_reqs{{tp_rank="{i}"}} 0\n' for i in range(1000)),
    "http://127.0.0.1:30002": f'sglang:num_running_reqs{{tp_rank="{"9" * 5000}"}} 1\n',
}
HEAVY_PAGE = "".join(
    f'sglang:num_running_reqs{{tp_rank="{i}"}} 0\n' for i in range(90_000)
)  # wedged the loop


def hostile_directory(root: Path, hostile: dict[str, tuple[int, Payload, str]]) -> Path:
    """The discovery directory: the control, the hostile probes, and hostile files (item 5)."""
    probes = root / "probes"
    for name, port in [("control", 40001), *((n, p) for n, (p, _, _) in hostile.items())]:
        write_discovery(probes, DiscoveryEntry(f"http://127.0.0.1:{port}", 1, name, 0, 0, 0, name, 1.0))
    write_discovery(
        probes, DiscoveryEntry(f"http://127.0.0.1:{DISABLED_PORT}", 1, "disabled", 0, 0, 0, "d", 1.0)
    )
    os.mkfifo(probes / "fifo.json")
    (probes / "zero.json").symlink_to("/dev/zero")
    with open(probes / "huge.json", "wb") as f:
        f.truncate(50 << 20)
    forged = DiscoveryEntry("http://169.254.169.254/latest/meta-data", 1, "imds", 0, 0, 0, "x", 1.0)
    (probes / "imds.json").write_text(json.dumps(forged.to_json()))
    return probes


class Fleet:
    """Every target and receiver, answering through one MockTransport; counts what it is asked."""

    def __init__(
        self,
        seed: Snapshot,
        clock: FakeClock,
        probes: dict[str, tuple[int, Payload, str]],
        pages: dict[str, str],
    ) -> None:
        self.seed, self.clock, self.probes, self.pages = seed, clock, probes, pages
        self.asked: Counter[str] = Counter()
        self.am: list[Any] = []
        self.hook: list[Any] = []
        self.metadata_asked = 0

    def doc(self, snap: Snapshot) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(json.dumps(dump_snapshot(replace(snap, taken_at=self.clock.now))))
        return out

    def __call__(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        self.asked[f"{url.host}:{url.port}"] += 1
        if url.port in (9093, 9099):
            (self.am if url.port == 9093 else self.hook).append(json.loads(request.content))
            return httpx.Response(200, json={})
        if url.host == "169.254.169.254":
            self.metadata_asked += 1
            return httpx.Response(200, text="secret")
        body = self._body(url)
        return httpx.Response(404) if body is None else httpx.Response(200, content=body)

    def _body(self, url: httpx.URL) -> bytes | None:
        if url.port == 40001:
            return _json(self.doc(self.seed))
        if url.port == DISABLED_PORT:
            off = replace(
                self.seed, pools={}, tripwires=(), probe=ProbeHealth(samples_total=3, disabled=True)
            )
            return _json(self.doc(off))
        for port, payload, _ in self.probes.values():
            if url.port == port:
                return payload(self.doc(self.seed))
        page = self.pages.get(f"http://{url.host}:{url.port}")
        return page.encode() if page is not None and url.path == "/metrics" else None


def sidecar_settings(root: Path, probes: Path, log: Path, state: Path) -> Settings:
    lines = [
        f"  - {{source: sglang-metrics, url: '{url}', worker: page{i}}}"
        for i, url in enumerate(HOSTILE_PAGES)
    ]
    lines.append(f"  - {{source: sglang-log, path: '{log}', worker: logged}}")
    (root / "targets.yaml").write_text("targets:\n" + "\n".join(lines) + "\n")
    return Settings.from_env(
        {
            "POOLWATCH_WORKER": "pod",
            "POOLWATCH_PROBE_DIR": str(probes),
            "POOLWATCH_TARGETS_FILE": str(root / "targets.yaml"),
            "POOLWATCH_ALERTMANAGER_URLS": AM,
            "POOLWATCH_WEBHOOK_URLS": HOOK,
            "POOLWATCH_STATE_FILE": str(state),
            "POOLWATCH_STALE_AFTER": "1e9",
        }
    )


def metric(text: str, name: str, **labels: str) -> float | None:
    """The value of the first sample of ``name`` whose labels include ``labels``."""
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


async def run_suite(
    tmp_path: Path,
    seed_snapshot: Snapshot,
    clock: FakeClock,
    hostile: dict[str, tuple[int, Payload, str]],
    pages: dict[str, str],
    *,
    measure: bool = False,
) -> int:
    """Run the sidecar against every attack; check what must hold; returns the traced peak bytes."""
    probes = hostile_directory(tmp_path, hostile)
    log = tmp_path / "sglang.log"
    log.write_text("[2026-01-01 00:00:00 TP0] Prefill batch. #new-seq: 1\n")
    state = tmp_path / "alerts.json"
    state.write_text('{"version": 1, "alerts": 5}')  # item 8: a corrupt state file
    settings = sidecar_settings(tmp_path, probes, log, state)
    fleet = Fleet(seed_snapshot, clock, hostile, pages)
    transport = httpx.MockTransport(fleet)
    store = SnapshotStore(clock=clock)
    alerting = build_alerting(settings, store, clock, transport=transport)
    provider = TargetSet(settings, clock).current
    scraper = Scraper(store, provider, settings.scrape, clock)
    app = create_app(settings, store=store, sources=[], clock=clock, alerting=alerting)
    if measure:
        tracemalloc.start()
    async with (
        httpx.AsyncClient(transport=transport) as client,
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sidecar") as api,
    ):
        receivers = [AlertmanagerReceiver(AM, 60.0), WebhookReceiver(HOOK)]  # as configured
        deliverers = [Deliverer(r, client, alerting.detector.alerts, clock) for r in receivers]
        for n in range(ROUNDS):
            if n == 2:
                log.unlink()  # item 11: a deleted log must go down
            await scraper.scrape_all(client)
            alerting.evaluate()
            for d in deliverers:
                await d.deliver_once()
            metrics = await api.get(
                "/metrics", headers={"Accept": "application/openmetrics-text; version=abc"}
            )
            alerts = await api.get("/api/v1/alerts")
            assert (metrics.status_code, alerts.status_code) == (200, 200), n  # items 1, 12
            clock.advance(STEP_S)
        peak = tracemalloc.get_traced_memory()[1] if measure else 0
        tracemalloc.stop()
        text = metrics.text
        firing = {(a["name"], a["labels"].get("worker")) for a in alerts.json() if a["state"] == "firing"}
    for source in provider():
        getattr(source, "close", lambda: None)()

    # the control keeps being scraped, and its alert is raised and delivered
    assert metric(text, "poolwatch_target_up", target="probe:control/dp0-tp0-pp0") == 1.0
    assert ("PoolwatchDoubleFree", "control") in firing
    assert any(a["labels"]["worker"] == "control" for body in fleet.am for a in body)
    # item 9: the webhook got one firing message per alert, however many rounds it fired
    told = Counter(a["fingerprint"] for body in fleet.hook for a in body["alerts"] if a["status"] == "firing")
    assert told
    assert set(told.values()) == {1}
    # item 7: the kill switch fires PoolwatchProbeDegraded; the metric is exported for the rank
    assert ("PoolwatchProbeDegraded", "disabled") in firing
    assert metric(text, "poolwatch_probe_disabled", worker="disabled") == 1.0
    # items 1, 3, 10, 11: every hostile target is down with a bounded reason, none raised an alert
    for name, (_, _, reason) in hostile.items():
        target = f"probe:{name}/dp0-tp0-pp0"
        assert metric(text, "poolwatch_target_up", target=target) == 0.0, name
        assert (
            metric(text, "poolwatch_target_scrape_errors_total", target=target, reason=reason) or 0
        ) > 0, name
        assert not any(w == name for _, w in firing if _ != "PoolwatchTargetDown"), name
    ninety = "sglang-metrics:http://127.0.0.1:30001"
    assert (metric(text, "poolwatch_target_scrape_errors_total", target=ninety, reason="too_large") or 0) > 0
    assert metric(text, "poolwatch_target_up", target="sglang-metrics:http://127.0.0.1:30002") == 1.0
    assert metric(text, "poolwatch_target_up", target=f"sglang-log:{log}") == 0.0  # deleted: down
    # item 5: hostile discovery files are skipped with reasons, the metadata address never asked
    assert fleet.metadata_asked == 0
    # item 8: the corrupt state file was set aside and counted
    assert metric(text, "poolwatch_internal_errors_total", what="state_file_corrupt") == 1.0
    assert list(tmp_path.glob("alerts.json.corrupt-*"))
    return peak


async def test_no_hostile_target_silences_the_sidecar_and_each_failure_is_visible(
    tmp_path: Path, seed_snapshot: Snapshot, clock: FakeClock
) -> None:
    await run_suite(tmp_path, seed_snapshot, clock, HOSTILE_PROBES, HOSTILE_PAGES)


@pytest.mark.slow
async def test_full_size_attacks_stay_under_the_memory_limit(
    tmp_path: Path, seed_snapshot: Snapshot, clock: FakeClock
) -> None:
    """100,000 queue names (3.4 GB in 100 s before), a 90,000-rank page (wedged the event loop),
    200,000-deep nesting: every allocation the sidecar made over the run stays under 256 MiB."""
    pages = {**HOSTILE_PAGES, "http://127.0.0.1:30001": HEAVY_PAGE}
    peak = await run_suite(
        tmp_path, seed_snapshot, clock, {**HOSTILE_PROBES, **HEAVY_PROBES}, pages, measure=True
    )
    assert peak < MEMORY_LIMIT, peak
