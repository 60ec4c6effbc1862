"""The final snapshot: the proof leaves the process before SGLang's idle check kills it.

Reads: the sample the probe just took at SGLang's idle hook.  Writes: one signed file in the discovery
directory (:func:`poolwatch.discovery.final.write_final`), synchronously, in the scheduler thread, only
when the crash is certain: SGLang's idle check is strict, runs at this idle hook, and finds a pool
out of balance -- both decided the way the release family's check decides them
(:func:`sglang_checks`, :func:`residual`: used against protected, whatever the probe's own phase
says), not by the probe's conservation gap.  Cost: one
JSON encoding of the snapshot and one small atomic file write (``benchmarks/bench_probe.py``
measures it; the goal is about 100 us).  The sidecar reads the file once the rank has vanished
(:mod:`poolwatch.sources.probe_source`) and pages with the exact pool, sign, slot ids and hook.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from poolwatch.conservation import gap, used
from poolwatch.model.rank import Phase, Pool, PoolAccount
from poolwatch.probe.core.reading import Reading
from poolwatch.probe.sglang.phase import gate_readings, phase_of, queue_depths
from poolwatch.probe.sglang.requests import role_of
from poolwatch.probe.sglang.shapes import Shape
from poolwatch.probe.sglang.snapshot import Sample

__all__ = [
    "Suspicion",
    "check_fails",
    "residual",
    "sglang_checks",
    "sglang_checks_now",
]


_PD_GATES = {  # 0.5.5.post3 to 0.5.10: self_check_during_idle returns early while these hold requests
    "prefill": ("prefill_inflight",),
    "decode": ("waiting", "decode_transfer", "decode_prealloc", "decode_offload"),
}
_NO_GATES: Mapping[str, int | None] = MappingProxyType({})


def sglang_checks(
    shape: Shape,
    role: str,
    phase: Phase,
    queues: Mapping[str, int | None],
    gates: Mapping[str, int | None] = _NO_GATES,
) -> bool:
    """Whether SGLang's idle check runs its pool check at its idle hook now, as the release family
    decides (reference §1.1; read in each family's wheel), not as the probe's phase says:

    * 0.5.4: ``self_check_during_idle`` checks unconditionally (the event loops call it when no
      batch formed; in PD prefill ``last_batch`` is cleared only after the check, so the probe's
      phase still says busy);
    * 0.5.5.post3 to 0.5.9: it returns early while PD queues hold requests (prefill inflight;
      decode waiting, transfer, prealloc, offload);
    * 0.5.10: first, with HiSparse on, while its staging queue holds requests;
    * 0.5.12: ``on_idle`` checks only when fully idle (the probe's ``idle``), and never with
      HiSparse on (its pool counters diverge during host backup);
    * 0.5.19 on: as 0.5.12, and not on a decode rank while deferred KV releases are pending.

    ``gates`` are :func:`~poolwatch.probe.sglang.phase.gate_readings`; a gate that could not be
    read counts as open (the check may run: the last word is kept), a PD queue that could not be
    read leaves the probe's own judgement."""
    if shape.idle_hook == "on_idle":
        return phase is Phase.IDLE and not _skipped_on_idle(shape, role, gates)
    if shape.since < (0, 5, 5):
        return True
    if shape.since >= (0, 5, 10) and gates.get("hisparse") and gates.get("hisparse_staging"):
        return False
    pd = _PD_GATES.get(role, ())
    if any(queues.get(q) is None for q in pd):
        return phase is Phase.IDLE  # a gate that could not be read: the probe's own judgement
    return not any(queues[q] for q in pd)


def _skipped_on_idle(shape: Shape, role: str, gates: Mapping[str, int | None]) -> bool:
    if gates.get("hisparse"):
        return True
    return shape.since >= (0, 5, 19) and role == "decode" and bool(gates.get("deferred_releases"))


def sglang_checks_now(sched: Any, shape: Shape) -> bool:
    """:func:`sglang_checks` from a cheap look at the scheduler (its queues and gates; none read
    for 0.5.4, whose check always runs at its hook)."""
    if shape.idle_hook != "on_idle" and shape.since < (0, 5, 5):
        return True
    reading = Reading()
    role = role_of(sched, reading)
    depths = queue_depths(sched, reading, role)
    return sglang_checks(shape, role, phase_of(depths), depths, gate_readings(sched, reading, role))


def residual(pool: Pool, account: PoolAccount, *, swa_used_only: bool = False) -> int | None:
    """What SGLang's formula finds in ``pool``: used slots less protected (and session-held) ones;
    SGLang ignores the requests' own holdings (none at a true idle).  ``swa_used_only``: before
    0.5.12 the SWA-hybrid check wants *no* used full/SWA slot, protected or not."""
    u = used(account)
    if u is None:
        return None
    if swa_used_only and pool in (Pool.FULL, Pool.SWA):
        return u
    if account.protected is None:
        return None
    return u - account.protected - (account.session_held or 0)


def check_fails(sample: Sample, shape: Shape) -> bool:
    """Whether SGLang's own idle check, at this idle hook, raises (strictness aside)."""
    if not sglang_checks(shape, sample.role, sample.phase, sample.queues, sample.gates):
        return False
    legacy_swa = shape.idle_hook != "on_idle" and Pool.SWA in sample.pools
    return any(
        residual(pool, account, swa_used_only=legacy_swa) not in (0, None)
        for pool, account in sample.pools.items()
    )


class Suspicion:
    """When to name the slots at once instead of at the census interval: SGLang's idle check is
    about to fail, or (guard on) a pool counts a slot twice while busy.  Once per distinct set of
    gaps, so a standing gap costs nothing more."""

    def __init__(self) -> None:
        self._seen: tuple[int | None, ...] = ()

    def due(self, sample: Sample, shape: Shape, *, idle_check: bool, guard: bool) -> bool:
        gaps = tuple(gap(a) for a in sample.pools.values())
        surplus = guard and any(g is not None and g < 0 for g in gaps)
        if not ((idle_check and check_fails(sample, shape)) or surplus) or gaps == self._seen:
            return False
        self._seen = gaps
        return True
