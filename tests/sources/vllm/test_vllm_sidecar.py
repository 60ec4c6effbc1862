"""A sidecar told ``POOLWATCH_ENGINE=vllm`` reads a vLLM server's /metrics and log end to end: the
coarse block pool and queues on its /metrics, EngineCore's crash as the same PoolwatchSchedulerCrashed
SGLang's ``Scheduler hit an exception`` raises, the block-pool frame in its text."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
from tests.sources.vllm.fakes import LOGS, PAGES, local, read_server_and_log

from poolwatch.model.rank import SourceKind
from poolwatch.settings.sidecar import Settings
from poolwatch.sidecar.alerting import build_alerting
from poolwatch.sidecar.app import create_app
from poolwatch.sidecar.scraper import Scraper
from poolwatch.sidecar.store import SnapshotStore
from poolwatch.sources.engine import sniff_engine
from poolwatch.sources.target_config import static_targets
from poolwatch.sources.targets import TargetSet
from rigs.fakes.clock import FakeClock

REAL_LOG = LOGS / "v0.32.0-cpu-real-double-free.log"


def pod_settings(log: Path) -> Settings:
    return Settings.from_env(
        {
            "POOLWATCH_ENGINE": "vllm",
            "POOLWATCH_WORKER": "vllm-0",
            "POOLWATCH_METRICS_URLS": "http://127.0.0.1:8000",
            "POOLWATCH_LOG_PATHS": str(log),
            "POOLWATCH_STALE_AFTER": "1e10",
        }
    )


def test_the_engine_setting_makes_the_flags_name_vllms_metrics_and_log(tmp_path: Path) -> None:
    kinds = [t.source for t in static_targets(pod_settings(tmp_path / "vllm.log"))]
    assert kinds == [SourceKind("vllm-metrics"), SourceKind("vllm-log")]


def test_a_vllm_log_is_told_from_an_sglang_log_by_its_lines() -> None:
    vllm = sniff_engine(REAL_LOG.read_text(errors="replace").splitlines())
    sglang = sniff_engine(
        (LOGS.parent / "sglang-logs" / "v0.5.12-swa-busy-check.log").read_text().splitlines()
    )
    assert vllm is not None
    assert sglang is not None
    assert (vllm[0].engine, sglang[0].engine) == ("vllm", "sglang")
    assert vllm[1].strong > 0
    assert vllm[1].first is not None


async def test_the_sidecar_exports_vllms_coarse_pool_and_pages_its_crash(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    shutil.copy(REAL_LOG, log)
    settings = pod_settings(log)
    clock = FakeClock(local("2026-12-03 16:27:25"))  # four seconds after EngineCore died
    store = SnapshotStore()
    alerting = build_alerting(settings, store, clock)  # the detector judges every snapshot stored
    await read_server_and_log(settings, store, clock)
    alerts = alerting.evaluate()
    app = create_app(settings, store=store, sources=[], clock=clock, alerting=alerting)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sidecar") as api:
        workers = {w["key"]: w for w in (await api.get("/api/v1/workers")).json()}
        metrics = (await api.get("/metrics")).text

    (crashed,) = [a for a in alerts if a.name == "PoolwatchSchedulerCrashed"]
    assert (crashed.all_labels["worker"], crashed.severity.value, crashed.state.value) == (
        "vllm-0",
        "critical",
        "firing",
    )
    assert "died: AssertionError;" in crashed.annotations["description"]
    assert (
        "v1/core/block_pool.py:690 in get_new_blocks: assert block.ref_cnt == 0"
        in crashed.annotations["description"]
    )
    rank = workers["vllm-0/dp0-tp0-pp0"]
    assert [s["source"] for s in rank["sources"]] == ["vllm-metrics", "vllm-log"]
    assert rank["incidents"] == {"scheduler_exception": 1}
    labels = 'dp_rank="0",pool="full",pp_rank="0",role="unified",tp_rank="0",worker="vllm-0"'
    assert f"poolwatch_pool_capacity_slots{{{labels}}} 8191.0" in metrics
    assert f"poolwatch_pool_used_slots{{{labels}}} 0.0" in metrics
    assert "poolwatch_pool_conservation_gap_slots{" not in metrics  # coarse: never a gap
    assert 'kind="scheduler_exception",pp_rank="0",role="unified",tp_rank="0",worker="vllm-0"} 1.0' in metrics
    assert 'engine="vllm"' in metrics
    assert 'release="0.32.0"' in metrics
    assert 'alertname="PoolwatchSchedulerCrashed"' in metrics


async def test_escape_sequences_from_vllms_version_and_labels_reach_no_label_and_no_api(
    tmp_path: Path,
) -> None:
    """ANSI and clipboard (OSC 52) sequences in ``/version`` and a model label arrive inert:
    ``/metrics`` and the API show them as visible signs, never as the bytes a terminal obeys."""
    hostile = "0.32.0\x1b]52;c;cG93bmVk\x07\x1b[2J\r"
    page = (PAGES / "v0.32.0-cpu-real.metrics.txt").read_text()
    page = page.replace('model_name="', 'model_name="\x1b[31m')

    def server(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/version":
            return httpx.Response(200, json={"version": hostile})
        return httpx.Response(200, text=page) if request.url.path == "/metrics" else httpx.Response(404)

    settings = pod_settings(tmp_path / "vllm.log")
    clock = FakeClock()
    store = SnapshotStore()
    sources = TargetSet(settings, clock).current
    async with httpx.AsyncClient(transport=httpx.MockTransport(server)) as client:
        await Scraper(store, sources, settings.scrape, clock).scrape_all(client)
    for source in sources():
        source.close()
    app = create_app(settings, store=store, sources=[], clock=clock)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sidecar") as api:
        metrics = (await api.get("/metrics")).text
        workers = (await api.get("/api/v1/workers")).text
    for text in (metrics, workers):
        assert not any(c in text for c in "\x1b\x07\r")
        assert "\\u001b" not in text
    assert 'release=""' in metrics  # not a release number: unknown, never shown
    assert "cG93bmVk" not in metrics + workers
    assert "␛[31m" in metrics  # the model label's escape, inert
