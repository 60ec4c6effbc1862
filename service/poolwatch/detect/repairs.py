"""What the probe's opt-in guard repaired, as PoolwatchProbeRepaired signals.  Pure functions.

A snapshot from a probe with ``POOLWATCH_PROBE_GUARD=1`` carries one
:class:`~poolwatch.model.Repair` per pool and kind (a running count plus the last action's slot
ids, hook, iteration and requests).  Any repair is a warning, per pool, for as long as the probe's
boot lasts: the worker kept serving, but a fault happened, the state of the requests named may be
wrong, and the worker should be restarted at a quiet moment (runbook PoolwatchProbeRepaired).
"""

from __future__ import annotations

from collections import defaultdict

from poolwatch.detect.alert import Signal, Verdict, rank_labels, sampled_subject
from poolwatch.detect.schema import Severity
from poolwatch.model import Pool, Repair, RepairKind, Snapshot

__all__ = ["PROBE_REPAIRED", "repair_judged", "repair_signals"]

PROBE_REPAIRED = "PoolwatchProbeRepaired"
_DID = {
    RepairKind.QUARANTINE: "took {n} off the free list (a live request or the tree owns it)",
    RepairKind.DEDUPLICATE: "removed duplicate free-list entries worth {n}",
    RepairKind.RETURN: "gave back {n} lost at idle (in no free list, tree or request)",
    RepairKind.REFUSE: "refused to free {n} still owned (the chunked request's or a tree node's)",
}


def _sentence(r: Repair) -> str:
    """Counts are slots (the unit of the pool's gap); ids are slot ids, or page ids of
    ``page_size`` slots each on a paged free list, and the sentence says which."""
    n = f"{r.count} slot" + ("" if r.count == 1 else "s")
    did = _DID[r.kind].format(n=n)
    shown = ", ".join(str(s) for s in r.slots[:16]) + (" ..." if len(r.slots) > 16 else "")
    ids = "slot(s)" if r.page_size <= 1 else f"page(s) of {r.page_size} slots"
    who = f"; request(s) {', '.join(r.requests[:4])} may have a wrong state" if r.requests else ""
    return f"The guard {did}; last: {ids} [{shown}] after {r.hook} at iteration {r.seq}{who}."


def repair_signals(snap: Snapshot) -> list[Signal]:
    """One warning per pool the guard repaired on this rank (this boot)."""
    by_pool: dict[Pool, list[Repair]] = defaultdict(list)
    for repair in snap.repairs:
        by_pool[repair.pool].append(repair)
    out = []
    for pool, repairs in sorted(by_pool.items(), key=lambda kv: list(Pool).index(kv[0])):
        text = " ".join(_sentence(r) for r in repairs)
        text += " SGLang kept serving; restart the worker at a quiet moment and report the fault upstream."
        value = float(sum(r.count for r in repairs))
        labels = rank_labels(snap.worker, pool.value)
        out.append(Signal(PROBE_REPAIRED, sampled_subject(snap), Severity.WARNING, labels, text, value))
    return out


def repair_judged(snap: Snapshot) -> set[Verdict]:
    """A probe snapshot judges the repair alert of every pool it reports."""
    if snap.probe is None:
        return set()
    return {(PROBE_REPAIRED, rank_labels(snap.worker, p.value)) for p in snap.pools}
