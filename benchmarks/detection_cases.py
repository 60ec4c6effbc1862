"""The fault scenarios the detection and page benchmarks run (``bench_detection.py``,
``bench_page.py``, ``bench_guard.py``): one emulated deployment per fault class of
``poolwatch_emulator.faults.FAULTS`` where the fault strikes early (step 40), the seed fault under
busy and under light traffic, and the alert each sign of gap pages with.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from poolwatch_emulator import ClusterConfig, ModelShape, WorkloadConfig, parse_fault
from poolwatch_emulator.faults import FAULTS
from poolwatch_emulator.scenarios import scenario_config

SIGN = {"surplus": "PoolwatchDoubleFree", "deficit": "PoolwatchSlotLeak"}
EPOCH = 1_767_225_600.0
PRESSURE = ModelShape(full_kv_tokens=16_384, context_len=32_768)
SWA = ModelShape(mamba_slots=None, swa_kv_tokens=131_072, page_size=16, context_len=32_768)


@dataclass(frozen=True)
class Case:
    name: str
    fault: str
    config: ClusterConfig


def case(fault: str, name: str = "", **overrides: Any) -> Case:
    """A deployment where ``fault`` strikes early (step 40): unified when it can, else PD."""
    info = FAULTS[fault]
    unified = "unified" in info.roles
    base: dict[str, Any] = {
        "prefill": int(not unified),
        "decode": int(not unified),
        "unified": int(unified),
        "version": info.emulated_versions[-1],
        "shape": SWA if "swa" in info.needs else ModelShape(context_len=32_768),
        "faults": (parse_fault(f"{fault}@step=40"),),
        "seed": 7,
        "epoch": EPOCH,
    }
    return Case(name or fault, fault, ClusterConfig(**{**base, **overrides}))


def cases() -> list[Case]:
    """Traffic that gives each fault its chance within seconds; the leaks under 30-second bursts
    with 1-minute lulls (SGLang's idle check runs in the first lull)."""
    seed = "pd-chunked-mamba-double-free"
    bursts = WorkloadConfig(burst_s=30, gap_s=60)
    return [
        case(seed, f"{seed} (busy)", chunked_prefill_size=256, workload=WorkloadConfig(rate=8.0)),
        case(seed, f"{seed} (light)", workload=WorkloadConfig(rate=1.5)),
        case(
            "mamba-cow-leak-on-abort",
            version="0.5.9",
            shape=PRESSURE,
            workload=replace(bursts, rate=20, output_median=400, abort_fraction=1.0, abort_within_s=30),
        ),
        case("full-kv-leak-on-retract", version="0.5.9", shape=PRESSURE, workload=replace(bursts, rate=20)),
        case(
            "pd-decode-abort-kv-leak",
            workload=replace(bursts, rate=12, abort_fraction=0.3, abort_within_s=5, transfer_latency_s=2.0),
        ),
        case("swa-page-overcount", workload=WorkloadConfig(burst_s=5, gap_s=60)),
        # speculative decoding's gap classes, in their catalogue scenarios (EAGLE, paged or SWA)
        *(
            Case(f, f, scenario_config(f, trigger="@step=40", epoch=EPOCH))
            for f in ("spec-stranded-tail-page", "spec-row-clamped-release", "spec-swa-frontier-off-by-one")
        ),
    ]
