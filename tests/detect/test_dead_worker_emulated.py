"""A dead worker through the emulator and the real probe: the seed double free kills the emulated
prefill worker, and for as long as nothing reports it, its double free stays firing in the
detector *and* exported (gap -1, stale) for the Prometheus rules and the dashboards; its log adds
the crash to the same rank; once gone for good it is forgotten with a reason."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import generate_latest
from tests.detect.emulated import scenario

from poolwatch.detect.alert import AlertState
from poolwatch.sidecar.app import build_registry
from rigs.emulated.watched import Watched

FAULT = "pd-chunked-mamba-double-free"


def prefill_alerts(w: Watched) -> dict[str, AlertState]:
    alerts = w.detector.evaluate(latest=w.store.latest(), targets=w.store.targets())
    return {a.name: a.state for a in alerts if dict(a.labels)["worker"] == "prefill-0"}


def mamba_gap(text: str) -> list[str]:
    return [
        line.rsplit(" ", 1)[1]
        for line in text.splitlines()
        if line.startswith("poolwatch_pool_conservation_gap_slots{")
        and 'worker="prefill-0"' in line
        and 'pool="mamba"' in line
    ]


def test_a_dead_workers_double_free_stays_firing_and_exported_until_it_is_forgotten(tmp_path: Path) -> None:
    w = Watched(scenario(FAULT, "@step=40"), tmp_path)
    assert w.run_until(lambda: bool(w.cluster.crashed), 6000)
    died = w.cluster.clock.now
    w.feed_log("prefill-0")
    registry = build_registry(w.store, w.now, w.detector_config.stale_after)
    assert w.run_until(lambda: w.cluster.clock.now >= died + 90, 20_000)
    states = prefill_alerts(w)
    assert states["PoolwatchDoubleFree"] is AlertState.FIRING  # 90 s after death: not resolved
    assert states["PoolwatchSchedulerCrashed"] is AlertState.FIRING  # the log's crash, on the same rank
    assert states["PoolwatchSnapshotStale"] is AlertState.FIRING
    text = generate_latest(registry).decode()
    assert mamba_gap(text) == ["-1.0"]  # what the rules and the dashboards read: not healthy
    assert (
        'poolwatch_snapshot_stale{dp_rank="0",pp_rank="0",role="prefill",tp_rank="0",worker="prefill-0"} 1.0'
        in text
    )
    gone = [s.worker.key for s in w.store.latest() if s.worker.worker == "prefill-0"]
    assert w.detector.forget(gone, "gone for good") >= 3
    assert {
        a.annotations.get("resolved_reason") for a in w.detector.alerts() if "prefill-0" in a.subject
    } == {"gone for good"}
