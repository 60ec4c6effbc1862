"""The final snapshot: the proof leaves the process before SGLang's idle check kills it.

Reads: the sample the probe just took at SGLang's idle hook.  Writes: one signed file in the discovery
directory (:func:`poolwatch.discovery.final.write_final`), synchronously, in the scheduler thread, only
when the crash is certain: the rank is fully idle, SGLang's idle check is strict, and an exactly
read pool is out of balance -- SGLang compares *used* with *protected*, and at full idle nothing
else may hold a slot, so any nonzero conservation gap is what it is about to raise on.  Cost: one
JSON encoding of the snapshot and one small atomic file write (``benchmarks/bench_probe.py``
measures it; the goal is about 100 us).  The sidecar reads the file once the rank has vanished
(:mod:`poolwatch.sources.probe`) and pages with the exact pool, sign, slot ids and hook.
"""

from __future__ import annotations

import json
import time

from poolwatch.codec.snapshot import dump_snapshot
from poolwatch.conservation import gap
from poolwatch.discovery.files import ensure_secret
from poolwatch.discovery.final import final_name, write_final
from poolwatch.model import Phase, Snapshot
from poolwatch.probe.sglang.snapshot import Sample

__all__ = ["Suspicion", "check_fails", "write_final_snapshot"]


def check_fails(sample: Sample) -> bool:
    """Whether SGLang's own idle check raises at this boundary (strictness aside)."""
    if sample.phase is not Phase.IDLE:
        return False
    return any(gap(account) not in (0, None) for account in sample.pools.values())


class Suspicion:
    """When to name the slots at once instead of at the census interval: SGLang's idle check is
    about to fail, or (guard on) a pool counts a slot twice while busy.  Once per distinct set of
    gaps, so a standing gap costs nothing more."""

    def __init__(self) -> None:
        self._seen: tuple[int | None, ...] = ()

    def due(self, sample: Sample, *, idle_check: bool, guard: bool) -> bool:
        gaps = tuple(gap(a) for a in sample.pools.values())
        surplus = guard and any(g is not None and g < 0 for g in gaps)
        if not ((idle_check and check_fails(sample)) or surplus) or gaps == self._seen:
            return False
        self._seen = gaps
        return True


def write_final_snapshot(directory: str, snap: Snapshot, secret: str | None = None) -> float:
    """Write ``snap`` as its rank's final snapshot, signed with the node's ``secret`` (the one the
    endpoint holds; when it serves none, the directory's, created if need be); returns the
    seconds it took.  Raises ``OSError`` (an unsafe directory included: nothing is written)."""
    started = time.perf_counter()
    w = snap.worker
    payload = json.dumps(dump_snapshot(snap), separators=(",", ":")).encode("utf-8")
    name = final_name(w.worker, w.dp_rank, w.tp_rank, w.pp_rank)
    write_final(directory, name, payload, secret or ensure_secret(directory))
    return time.perf_counter() - started
