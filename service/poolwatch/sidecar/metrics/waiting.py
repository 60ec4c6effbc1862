"""The samples of what waits on a rank: its holds and its scheduler's progress (part of each rank's
block, :class:`~poolwatch.sidecar.metrics.collectors.PoolCollector`).  Sample exposition::

    poolwatch_pool_hold_slots{worker="decode-0",...,pool="full",reason="kv_recv"} 112.0
    poolwatch_pool_hold_age_seconds{...,pool="full",reason="kv_recv"} 512.3
    poolwatch_pool_hold_timeout_seconds{...,pool="full",reason="kv_recv"} 480.0
    poolwatch_scheduler_stalled_steps{worker="decode-0",...} 0.0

Every value is the snapshot's own (an age is measured at ``taken_at``), so a rank's block is
rendered once per snapshot like the rest of it.  A stale rank's holds and progress are withheld:
its last snapshot no longer says what waits now.
"""

from __future__ import annotations

from poolwatch.catalog.spec import rank_label_values
from poolwatch.model.snapshot import Snapshot
from poolwatch.sidecar.metrics.families import Families

__all__ = ["WAITING_METRICS", "add_waiting"]

HOLD_METRICS = (
    "poolwatch_pool_hold_slots",
    "poolwatch_pool_hold_owners",
    "poolwatch_pool_hold_age_seconds",
    "poolwatch_pool_hold_timeout_seconds",
)
PROGRESS_METRICS = (
    "poolwatch_scheduler_admitted_total",
    "poolwatch_scheduler_preemptions_total",
    "poolwatch_scheduler_fruitless_preemptions_total",
    "poolwatch_scheduler_waiting_admittable",
    "poolwatch_scheduler_stalled_steps",
    "poolwatch_scheduler_stalled_seconds",
)
WAITING_METRICS = HOLD_METRICS + PROGRESS_METRICS


def add_waiting(fam: Families, snap: Snapshot) -> None:
    """The hold and progress samples of ``snap`` (a fresh snapshot's)."""
    rank = rank_label_values(snap.worker)
    for h in snap.holds:
        labels = (*rank, h.pool.value, h.reason.value)
        fam.add("poolwatch_pool_hold_slots", labels, h.slots)
        fam.add("poolwatch_pool_hold_owners", labels, h.owners)
        fam.add("poolwatch_pool_hold_age_seconds", labels, round(h.age(snap.taken_at), 3))
        if h.timeout is not None:
            fam.add("poolwatch_pool_hold_timeout_seconds", labels, h.timeout)
    p = snap.progress
    if p is None:
        return
    fam.add("poolwatch_scheduler_admitted_total", rank, p.admitted)
    if p.preemptions_seen:
        fam.add("poolwatch_scheduler_preemptions_total", rank, p.preempted)
        fam.add("poolwatch_scheduler_fruitless_preemptions_total", rank, p.fruitless)
    fam.add("poolwatch_scheduler_waiting_admittable", rank, p.waiting)
    fam.add("poolwatch_scheduler_stalled_steps", rank, p.stalled_steps)
    fam.add("poolwatch_scheduler_stalled_seconds", rank, round(p.stalled_for(snap.taken_at), 3))
