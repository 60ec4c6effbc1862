"""What a vLLM pod's sidecar exports: its ``/metrics``, rendered by the sidecar's own app from vLLM
ranks as each source sees them, for the dashboard tests to hold every panel against.

* ``vllm-leaking``: the real vLLM probe (release 0.33.0) on the stand-in scheduler of
  ``rigs/fakes/vllm.py``, leaking blocks for 400 s (a gap, a leak rate, an exhaustion
  forecast, ``missing`` tripwires) and then freeing one request's blocks twice (``negative_ref``);
* ``vllm-guarded``: the probe with guard on (``POOLWATCH_PROBE_GUARD=1``, 0.33.0) refusing a
  double free (a ``refuse`` repair of pool ``full``);
* ``vllm-unverified``: the probe on 0.35.0, a release newer than any it read (``release_verified``
  false), busy;
* ``vllm-multimodal``: the probe (0.34.0) on a scheduler with an encoder cache, holding blocks of a
  finished request kept for a KV transfer (a hold);
* ``vllm-drifted``: the probe (0.33.0) on a pool whose free queue is sound but whose count says one
  block more than it holds (a counter witness: ``poolwatch_pool_counter_drift_slots``);
* ``vllm-coarse``: no probe; the sidecar reads vLLM 0.32.0's own ``/metrics`` page and its log up
  to EngineCore's fatal error (the real captures in ``tests/fixtures``).

Everything a vLLM rank can show is here, so a rank-level metric missing from it is one vLLM never
exports.
"""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import replace
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families
from tests.helpers import SteppingClock
from tests.sources.vllm.fakes import LOGS, local, read_server_and_log

from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.probe import new_probe
from poolwatch.probe.lifecycle import attach, detach
from poolwatch.probe.vllm.engine import VLLM, vllm_release
from poolwatch.probe.vllm.extras import VllmProbe
from poolwatch.settings.sidecar import Settings
from poolwatch.sidecar.alerting import AlertWiring, build_alerting
from poolwatch.sidecar.app import create_app
from poolwatch.sidecar.store import SnapshotStore
from rigs.fakes.clock import FakeClock
from rigs.fakes.vllm import Scheduler

__all__ = ["Sample", "vllm_pod_metrics", "vllm_pod_samples"]

Sample = tuple[str, dict[str, str]]  # a sample's name and labels
NOW = local("2026-12-03 16:27:25")  # four seconds after the captured EngineCore died


def _probe(sched: Scheduler, worker: str, release: str) -> VllmProbe:
    config = ProbeConfig(serve=False, sample_interval_s=0.01)
    environ = {"POOLWATCH_WORKER": worker}
    clock = SteppingClock()
    return new_probe(VLLM, sched, config, release=vllm_release(release), environ=environ, clock=clock)


def _put(store: SnapshotStore, probe: VllmProbe, at: float) -> None:
    snap = probe.sample_now(census=True)
    assert snap is not None
    store.put(replace(snap, taken_at=at))


def _leaking(store: SnapshotStore) -> None:
    sched = Scheduler(256)
    probe = _probe(sched, "vllm-leaking", "0.33.0")
    _put(store, probe, NOW - 410)  # the first idle census balances
    for i in range(40):
        rid = f"r{i}"
        sched.add(rid, 2)
        if i % 3:
            sched.finish(rid)
        else:  # aborted and forgotten by the scheduler, its blocks never returned
            del sched.requests[rid]
            sched.running = [r for r in sched.running if r.request_id != rid]
        _put(store, probe, NOW - 400 + 10 * i)
    blocks = sched.add("twice", 2)
    sched.finish("twice")
    sched.pool.free_blocks(blocks)  # the same list again
    _put(store, probe, NOW - 1)


def _guarded(store: SnapshotStore) -> None:
    """Attached as vLLM attaches it (the pool's ``free_blocks`` wrapped), guard on."""
    sched = Scheduler(64)
    config = ProbeConfig(serve=False, sample_interval_s=0.01, guard=True)
    environ = {"POOLWATCH_WORKER": "vllm-guarded"}
    release = vllm_release("0.33.0")
    probe = attach(VLLM, sched, config, release=release, environ=environ, clock=SteppingClock())
    assert isinstance(probe, VllmProbe)
    try:
        _put(store, probe, NOW - 20)
        blocks = sched.add("a", 3)
        sched.schedule()
        sched.finish("a")
        sched.pool.free_blocks(blocks)  # the same list again: refused inside free_blocks
        _put(store, probe, NOW - 1)
    finally:
        detach(sched)


def _unverified(store: SnapshotStore) -> None:
    sched = Scheduler(64)
    probe = _probe(sched, "vllm-unverified", "0.35.0")
    _put(store, probe, NOW - 20)  # balanced at the first idle moment: read, unverified
    sched.add("a", 3)
    _put(store, probe, NOW - 1)


def _multimodal(store: SnapshotStore) -> None:
    sched = Scheduler(64)
    sched.encoder_cache_manager = type("EncoderCacheManager", (), {"cache_size": 2048})()  # type: ignore[attr-defined]
    sched.encoder_cache_manager.num_free_slots = sched.encoder_cache_manager.num_freeable_slots = 2048
    side = type("NixlPullScheduler", (), {"_kv_lease_duration": 30, "decoder_kv_blocks_ttl": 480})()
    sched.connector = type("NixlConnector", (), {"connector_scheduler": side})()  # type: ignore[attr-defined]
    probe = _probe(sched, "vllm-multimodal", "0.34.0")
    _put(store, probe, NOW - 20)
    sched.add("a", 3)
    sched.add("sent", 4)
    sched.finish("sent", keep_for_transfer=True)  # a connector sends its KV: vLLM keeps the blocks
    _put(store, probe, NOW - 1)


def _drifted(store: SnapshotStore) -> None:
    sched = Scheduler(64)
    probe = _probe(sched, "vllm-drifted", "0.33.0")
    _put(store, probe, NOW - 20)
    sched.add("a", 3)
    sched.pool.free_block_queue.num_free_blocks += 1  # a count above the queue it describes
    _put(store, probe, NOW - 1)


async def _render(settings: Settings, store: SnapshotStore, clock: FakeClock, alerting: AlertWiring) -> str:
    app = create_app(settings, store=store, sources=[], clock=clock, alerting=alerting)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sidecar") as api:
        return (await api.get("/metrics")).text


async def _metrics(log: Path) -> str:
    settings = Settings.from_env(
        {
            "POOLWATCH_ENGINE": "vllm",
            "POOLWATCH_WORKER": "vllm-coarse",
            "POOLWATCH_POD": "vllm-0",
            "POOLWATCH_METRICS_URLS": "http://127.0.0.1:8000",
            "POOLWATCH_LOG_PATHS": str(log),
            "POOLWATCH_STALE_AFTER": "1e10",
        }
    )
    clock = FakeClock(NOW)
    store = SnapshotStore()
    alerting = build_alerting(settings, store, clock)  # the detector judges every snapshot stored
    _leaking(store)
    _guarded(store)
    _unverified(store)
    _multimodal(store)
    _drifted(store)
    await read_server_and_log(settings, store, clock)
    alerting.evaluate()
    return await _render(settings, store, clock, alerting)


def vllm_pod_metrics(tmp: Path) -> str:
    """The pod sidecar's ``/metrics`` text (``tmp``: where the captured log is copied to be tailed)."""
    log = tmp / "vllm.log"
    shutil.copy(LOGS / "v0.32.0-cpu-real-double-free.log", log)
    return asyncio.run(_metrics(log))


def vllm_pod_samples(text: str) -> list[Sample]:
    return [(s.name, dict(s.labels)) for f in text_string_to_metric_families(text) for s in f.samples]
