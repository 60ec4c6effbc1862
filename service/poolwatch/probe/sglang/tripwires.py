"""The direct #12994 tripwire, run right after ``process_prefill_chunk``: is the chunked request's
Mamba slot on the free list?  Its findings go to the probe's
:class:`~poolwatch.probe.core.tripwires.TripwireLog` like the censuses' do.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from poolwatch.model.findings import Tripwire, TripwireKind
from poolwatch.model.rank import Pool
from poolwatch.probe.census.proofs import MAX_IDS
from poolwatch.probe.core.reading import MISSING, Reading
from poolwatch.probe.sglang.footprint import mamba_slot_objects
from poolwatch.probe.sglang.mamba_census import mamba_free_list, rid_of
from poolwatch.probe.sglang.shapes import Shape

__all__ = ["chunk_tripwires"]


def chunk_tripwires(sched: Any, shape: Shape, reading: Reading, seq: int, hook: str) -> tuple[Tripwire, ...]:
    """The direct #12994 check: is the chunked request's Mamba slot on the free list?  (One
    small ``isin`` on the device; only the hits come back to the host.)"""
    import torch

    chunked = reading.attr(sched, "chunked_req")
    if chunked is MISSING or chunked is None:
        return ()
    slots = [t.reshape(-1).to(torch.int64) for t in mamba_slot_objects(chunked, shape) if t is not None]
    free = mamba_free_list(sched, shape, reading)
    if not slots or free is MISSING:
        return ()
    hits = [int(i) for i in free[torch.isin(free, torch.cat(slots))].tolist()]
    if not hits:
        return ()
    rid = (rid_of(chunked),)
    out = [Tripwire(TripwireKind.FREE_AND_LIVE, Pool.MAMBA, _cap(set(hits)), hook, seq, rid)]
    dup = [i for i, n in Counter(hits).items() if n > 1]
    if dup:
        out.append(Tripwire(TripwireKind.FREE_DUPLICATE, Pool.MAMBA, _cap(dup), hook, seq, rid))
    return tuple(out)


def _cap(ids: Iterable[int]) -> tuple[int, ...]:
    return tuple(sorted(ids)[:MAX_IDS])
