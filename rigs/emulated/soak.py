"""A fault-free soak of an emulated SGLang PD deployment under the probe and the detector (the
detector's soak test, the guard's soak test and ``benchmarks/bench_guard_free.py`` run it; its
traffic, :func:`soak_config`, is ``benchmarks/bench_long_run.py``'s)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from poolwatch.probe.lifecycle import probe_of
from poolwatch.probe.sglang.extras import SglangProbe
from poolwatch_emulator.build import ModelShape
from poolwatch_emulator.cluster_config import ClusterConfig
from poolwatch_emulator.workload import WorkloadConfig
from rigs.emulated.watched import EPOCH, Counts, Watched


def soak_config(version: str, seed: int) -> ClusterConfig:
    """Heavy fault-free PD traffic: long prompts chunked at 1024 tokens, decode KV pressure that
    forces retractions, 5 % of requests aborted, 30-minute bursts with 5-minute quiet gaps (so
    SGLang's idle checks run too)."""
    return ClusterConfig(
        prefill=1,
        decode=1,
        version=version,
        seed=seed,
        epoch=EPOCH,
        dt=0.5,
        chunked_prefill_size=1024,
        shape=ModelShape(full_kv_tokens=49_152, max_running_requests=96, mamba_slots=288, context_len=32_768),
        workload=WorkloadConfig(
            rate=0.35,
            prompt_median=1400,
            output_median=80,
            abort_fraction=0.05,
            abort_within_s=20,
            burst_s=1800,
            gap_s=300,
        ),
    )


@dataclass(frozen=True)
class SoakResult:
    version: str
    seed: int
    hours: float
    alerts: tuple[tuple[str, str, str], ...]  # (name, severity, labels) of every alert that fired
    counts: Counts
    retractions: int
    crashed: tuple[str, ...]
    repairs: int = 0  # slots the probes' guard repaired (guard mode only)
    refusing: int = 0  # ranks whose Mamba free guard v2 wraps (guard mode, every release family)
    refused: int = 0  # slots guard v2 refused to free (also counted in ``repairs``)


def soak(version: str, seed: int, hours: float, directory: str, guard: bool = False) -> SoakResult:
    """Run fault-free traffic for ``hours`` simulated hours under the probe and the detector."""
    w = Watched(soak_config(version, seed), Path(directory), sample_interval=1.0, guard=guard)
    end = hours * 3600.0
    while w.cluster.clock.now < end and not w.cluster.crashed:
        w.step()
    fired = tuple(
        (f.alert.name, f.alert.severity.value, str(dict(f.alert.labels))) for f in w.first_firing.values()
    )
    crashed = tuple(f"{c.name}: {c.crash_message}" for c in w.cluster.crashed)
    repairs = sum(
        r.count
        for rank in w.cluster.schedulers
        if (p := probe_of(rank)) is not None and p.latest is not None
        for r in p.latest.repairs
    )
    probes = [p for rank in w.cluster.schedulers if isinstance(p := probe_of(rank), SglangProbe)]
    refusing = sum(1 for p in probes if p.refuser is not None)
    refused = sum(p.refuser.refused for p in probes if p.refuser is not None)
    hours_run = w.cluster.clock.now / 3600.0
    return SoakResult(
        version, seed, hours_run, fired, w.counts, w.retractions(), crashed, repairs, refusing, refused
    )
