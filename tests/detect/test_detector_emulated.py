"""Every fault class of the emulator raises the right alert (pool, sign, rank) through the real
probe, before the emulated idle check crashes the server; the seed fault at its first chunk
boundary; and fault-free load raises nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.detect.emulated import scenario

from poolwatch.detect.alert import AlertState
from poolwatch_emulator.build import ModelShape
from poolwatch_emulator.faults import FAULTS
from poolwatch_emulator.scenarios import scenario_config
from poolwatch_emulator.workload import WorkloadConfig
from rigs.emulated.watched import EPOCH, Watched

CONSERVATION = ("PoolwatchDoubleFree", "PoolwatchSlotLeak", "PoolwatchHostPoolGap")
SIGN = {"surplus": "PoolwatchDoubleFree", "deficit": "PoolwatchSlotLeak"}
PRESSURE = ModelShape(full_kv_tokens=16_384, context_len=32_768)  # small KV: queues, retractions
HICACHE = ModelShape(full_kv_tokens=16_384, mamba_slots=None, host_kv_tokens=32_768, context_len=32_768)

# fault -> scenario overrides: traffic that gives the fault its chance within seconds
SCENARIOS: dict[str, dict[str, Any]] = {
    "pd-chunked-mamba-double-free": {},
    "mamba-cow-leak-on-abort": {
        "version": "0.5.9",
        "shape": PRESSURE,
        "workload": WorkloadConfig(rate=20, output_median=400, abort_fraction=1.0, abort_within_s=30),
    },
    "full-kv-leak-on-retract": {
        "version": "0.5.9",
        "shape": PRESSURE,
        "workload": WorkloadConfig(rate=20, output_median=400),
    },
    "pd-decode-abort-kv-leak": {
        "workload": WorkloadConfig(rate=12, abort_fraction=0.3, abort_within_s=5, transfer_latency_s=2.0),
    },
    # the probe counts SWA holdings while busy from each request's window frontier
    "swa-page-overcount": {"workload": WorkloadConfig(burst_s=5, gap_s=60)},
    # HiCache: the host pool has its own alert, and SGLang's idle check never sees it
    "hicache-host-leak": {"shape": HICACHE},
    "hicache-host-double-free": {"shape": HICACHE},
}


def conservation_alerts(w: Watched) -> list[tuple[str, str, str, int]]:
    """(alert, worker, pool, step first seen firing) of every DoubleFree / SlotLeak."""
    return sorted(
        (f.alert.name, dict(f.alert.labels)["worker"], dict(f.alert.labels)["pool"], f.step)
        for f in w.first_firing.values()
        if f.alert.name in CONSERVATION
    )


# the faults the conservation gap sees; those without an entry above run in the catalogue's own
# scenario (speculative decoding's: EAGLE, paged or SWA).  vLLM's encoder cache pages by the gap's
# sign too, but on vLLM's ranks: the emulated SGLang workers' probe never reads it (SGLang's books
# and idle check never count it)
GAP_FAULTS = {name for name, info in FAULTS.items() if info.pages in CONSERVATION and info.pool != "encoder"}


def run_fault(fault: str, directory: Path, max_steps: int = 6000) -> Watched:
    if fault in SCENARIOS:
        config = scenario(fault, "@step=40", **SCENARIOS[fault])
    else:
        config = scenario_config(fault, trigger="@step=40", epoch=EPOCH)
    w = Watched(config, directory)
    w.run_until(lambda: bool(conservation_alerts(w)) or bool(w.cluster.crashed), max_steps)
    w.run_until(lambda: False, 5)  # a few more steps: the crash, if it comes
    return w


def test_every_conservation_fault_class_has_a_scenario() -> None:
    assert set(SCENARIOS) <= GAP_FAULTS
    assert all(FAULTS[f].sign in SIGN for f in GAP_FAULTS - {"hicache-host-leak", "hicache-host-double-free"})


def test_the_seed_double_free_is_paged_at_its_first_chunk_boundary_before_the_crash(tmp_path: Path) -> None:
    w = run_fault("pd-chunked-mamba-double-free", tmp_path)
    step, _, _ = w.struck["pd-chunked-mamba-double-free"]
    assert conservation_alerts(w) == [("PoolwatchDoubleFree", "prefill-0", "mamba", step)]
    [firing] = [f for f in w.first_firing.values() if f.alert.name == "PoolwatchDoubleFree"]
    assert firing.alert.severity.value == "critical"
    description = firing.alert.annotations["description"]
    assert "Tripwire free_and_live" in description
    assert "after process_prefill_chunk" in description
    assert "the server will crash at its next idle moment" in description
    assert w.crashed_at["prefill-0"] > step  # SGLang's own idle check came later, and killed it


def test_the_seed_crash_in_the_log_raises_idle_check_failed_and_scheduler_crashed(tmp_path: Path) -> None:
    w = run_fault("pd-chunked-mamba-double-free", tmp_path)
    assert w.cluster.crashed
    assert w.feed_log("prefill-0") > 0
    by_name = {a.name: a for a in w.detector.evaluate() if a.state is AlertState.FIRING}
    assert {"PoolwatchIdleCheckFailed", "PoolwatchSchedulerCrashed"} <= set(by_name)
    idle = by_name["PoolwatchIdleCheckFailed"]
    assert dict(idle.labels)["worker"] == "prefill-0"
    assert "Figures: mamba: surplus of 1 slot (double free)" in idle.annotations["description"]
    assert by_name["PoolwatchSchedulerCrashed"].severity.value == "critical"


@pytest.mark.slow
@pytest.mark.parametrize("fault", sorted(GAP_FAULTS - {"pd-chunked-mamba-double-free"}))
def test_every_fault_class_raises_the_right_alert_before_the_idle_check_crashes(
    fault: str, tmp_path: Path
) -> None:
    info = FAULTS[fault]
    w = run_fault(fault, tmp_path)
    assert fault in w.struck, f"{fault} never had its chance"
    step, worker, _ = w.struck[fault]
    alerts = conservation_alerts(w)
    expected = "PoolwatchHostPoolGap" if info.pool == "host" else SIGN[info.sign]
    assert expected == info.pages
    assert [a[:3] for a in alerts if a[2] == info.pool] == [(expected, worker, info.pool)]
    assert all(a[:2] == (expected, worker) and a[2] in (info.pool, "swa") for a in alerts)  # SWA: both
    fired_at = alerts[0][3]
    assert fired_at >= step
    crash = w.crashed_at.get(worker)
    assert crash is None or fired_at < crash
