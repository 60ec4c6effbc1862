"""The lead's API and /metrics serve what the SGLang sources and probe sources put in the store."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import httpx
from tests.helpers import FIXTURES
from tests.sources.sglang.fakes import captured, sglang_server

from poolwatch.codec.snapshot import dump_snapshot
from poolwatch.model.snapshot import Snapshot
from poolwatch.settings.sidecar import Settings
from poolwatch.sidecar.app import create_app
from poolwatch.sidecar.scraper import Scraper
from poolwatch.sidecar.store import SnapshotStore
from poolwatch.sources.targets import TargetSet
from rigs.fakes.clock import FakeClock

SGLANG = FIXTURES / "sglang"


def fleet(seed: Snapshot) -> Callable[[httpx.Request], httpx.Response]:
    sglang = sglang_server(*captured("v0.5.12-dp2-decode"))

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.host == "probe":
            return httpx.Response(200, json=dump_snapshot(replace(seed, source="probe")))
        return sglang(request)

    return handle


def central_settings(tmp_path: Path) -> Settings:
    """A central sidecar: three unrelated servers, each target naming its worker or its address."""
    log = tmp_path / "prefill.log"
    log.write_text((SGLANG / "v0.5.4.post1-pd-prefill-mamba-crash.log").read_text())
    targets = tmp_path / "targets.yaml"
    targets.write_text(
        "targets:\n"
        "  - {source: probe, url: 'http://probe:41234'}\n"
        "  - {source: sglang-metrics, url: 'http://decode-0:30000'}\n"
        f"  - {{source: sglang-log, path: '{log}', worker: prefill}}\n"
    )
    return Settings.from_env(
        {
            "POOLWATCH_WORKER": "central",
            "POOLWATCH_TARGETS_FILE": str(targets),
            "POOLWATCH_STALE_AFTER": "1e10",
        }
    )


def pod_settings(tmp_path: Path) -> Settings:
    """A per-pod sidecar: the pod's probe, its SGLang /metrics and its log (any file name)."""
    log = tmp_path / "sglang.log"
    log.write_text((SGLANG / "v0.5.4.post1-pd-prefill-mamba-crash.log").read_text())
    return Settings.from_env(
        {
            "POOLWATCH_WORKER": "decode-0",
            "POOLWATCH_ROLE": "decode",
            "POOLWATCH_PROBE_URLS": "http://probe:41234",
            "POOLWATCH_METRICS_URLS": "http://127.0.0.1:30000",
            "POOLWATCH_LOG_PATHS": str(log),
            "POOLWATCH_STALE_AFTER": "1e10",
        }
    )


async def scrape_into_store(
    settings: Settings, seed: Snapshot, clock: FakeClock, rounds: int
) -> SnapshotStore:
    store = SnapshotStore()
    sources = TargetSet(settings, clock).current
    loop = Scraper(store, sources, settings.scrape, clock)
    async with httpx.AsyncClient(transport=httpx.MockTransport(fleet(seed))) as client:
        for _ in range(rounds):
            await loop.scrape_all(client)
            clock.advance(1)
    for source in sources():
        getattr(source, "close", lambda: None)()
    return store


async def test_one_pods_probe_metrics_and_log_merge_into_one_worker_with_exact_figures_and_incidents(
    tmp_path: Path, seed_snapshot: Snapshot, clock: FakeClock
) -> None:
    settings = pod_settings(tmp_path)
    store = await scrape_into_store(settings, seed_snapshot, clock, rounds=5)
    app = create_app(settings, store=store, sources=[], clock=clock)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sidecar") as api:
        workers = {w["key"]: w for w in (await api.get("/api/v1/workers")).json()}
        metrics = [(await api.get("/metrics")).text for _ in range(3)]
    assert {w["worker"]["worker"] for w in workers.values()} == {"decode-0"}
    rank = workers["decode-0/dp0-tp0-pp0"]
    assert rank["source"] == "probe"  # exact figures speak for the rank
    assert [s["source"] for s in rank["sources"]] == ["probe", "sglang-metrics", "sglang-log"]
    for view in rank["sources"]:  # every finding says which source it came from
        assert {f["source"] for f in view["findings"]} <= {view["source"]}
    assert {f["basis"] for f in rank["sources"][0]["findings"]} == {"exact"}
    assert rank["incidents"] == {"leak_detected": 1, "scheduler_exception": 1}
    for text in metrics:  # every scrape: the exact gap and the log's incidents, on the pod's worker
        assert (
            'poolwatch_pool_conservation_gap_slots{dp_rank="0",pool="mamba",pp_rank="0",role="decode",'
            in text
        )
        assert (
            'kind="scheduler_exception",pp_rank="0",role="decode",tp_rank="0",worker="decode-0"} 1.0' in text
        )
        assert 'worker="sglang"' not in text
        assert 'worker="127.0.0.1:30000"' not in text


async def test_workers_history_targets_and_metrics_serve_every_source(
    tmp_path: Path, seed_snapshot: Snapshot, clock: FakeClock
) -> None:
    settings = central_settings(tmp_path)
    store = await scrape_into_store(
        settings, seed_snapshot, clock, rounds=2
    )  # a quiet log lets its last record through
    app = create_app(settings, store=store, sources=[], clock=clock)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sidecar") as api:
        workers = (await api.get("/api/v1/workers")).json()
        keys = {w["key"]: w for w in workers}
        history = (await api.get("/api/v1/workers/prefill/dp0-tp1-pp0/history")).json()
        targets = (await api.get("/api/v1/targets")).json()
        metrics = (await api.get("/metrics")).text
    assert set(keys) == {
        "qwen3-next-prefill-0/dp0-tp0-pp0",  # the probe payload names its worker
        "prefill/dp0-tp0-pp0",  # the log's ranks, named after its target's worker
        "prefill/dp0-tp1-pp0",
        "decode-0:30000/dp0-tp0-pp0",  # the metrics page's DP ranks, named after the server
        "decode-0:30000/dp1-tp0-pp0",
    }
    decode_dp1 = {f["pool"]: f for f in keys["decode-0:30000/dp1-tp0-pp0"]["findings"]}
    assert decode_dp1["mamba"]["balance"] == "surplus"
    assert keys["decode-0:30000/dp1-tp0-pp0"]["snapshot"]["source"] == "sglang-metrics"
    assert [s["source"] for s in history["snapshots"]] == ["sglang-log", "sglang-log"]
    assert [s["incidents"][0]["kind"] for s in history["snapshots"]] == [
        "leak_detected",
        "scheduler_exception",
    ]
    assert {t["name"]: t["up"] for t in targets} == {
        "probe:http://probe:41234": True,
        "sglang-metrics:http://decode-0:30000": True,
        f"sglang-log:{tmp_path / 'prefill.log'}": True,
    }
    assert 'poolwatch_incidents_total{dp_rank="0",kind="leak_detected",pp_rank="0",role="prefill"' in metrics


def test_build_sources_gives_one_source_per_configured_target(tmp_path: Path, clock: FakeClock) -> None:
    sources = list(TargetSet(central_settings(tmp_path), clock).current())
    assert [s.target.source for s in sources] == ["probe", "sglang-metrics", "sglang-log"]
    for source in sources:
        getattr(source, "close", lambda: None)()
