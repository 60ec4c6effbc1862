"""The repair family: what the probe's opt-in guard repaired, as PoolwatchProbeRepaired.  Pure.

A snapshot from a probe with ``POOLWATCH_PROBE_GUARD=1`` carries one
:class:`~poolwatch.model.findings.Repair` per pool and kind (a running count plus the last action's slot
ids, hook, iteration and requests).  Any repair is a warning, per pool, for as long as the probe's
boot lasts: the worker kept serving, but a fault happened, the state of the requests named may be
wrong, and the worker should be restarted at a quiet moment (runbook PoolwatchProbeRepaired).
A probe snapshot is a verdict on the repair alert of every pool it reports.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from poolwatch.detect.alert import Signal, Verdict, rank_labels, sampled_subject
from poolwatch.detect.call_site import repair_site_sentence
from poolwatch.detect.family import Seen
from poolwatch.detect.schema import AlertName, Mode, Severity
from poolwatch.engines import UnknownEngine, engine_entry
from poolwatch.model.findings import Repair, RepairKind
from poolwatch.model.rank import Pool

__all__ = ["GuardRepairs"]

_DID = {
    RepairKind.QUARANTINE: "took {n} off the free list (a live request or the tree owns it)",
    RepairKind.DEDUPLICATE: "removed duplicate free-list entries worth {n}",
    RepairKind.RETURN: "gave back {n} lost at idle (in no free list, tree or request)",
    RepairKind.REFUSE: (
        "refused to free {n} still owned or already free (a live request's, a tree node's, "
        "a released request row's)"
    ),
}
# vLLM's guard refuses inside its block pool's free_blocks; its unit is the block
_VLLM_REFUSE = "refused to free {n} already free or still listed by a request (a double or premature free)"


def _sentence(r: Repair, engine: str) -> str:
    """Counts are slots (the unit of the pool's gap; vLLM's blocks); ids are slot ids, or page
    ids of ``page_size`` slots each on a paged free list, and the sentence says which."""
    unit = "block" if engine == "vllm" else "slot"
    n = f"{r.count} {unit}" + ("" if r.count == 1 else "s")
    refuse = engine == "vllm" and r.kind is RepairKind.REFUSE
    did = (_VLLM_REFUSE if refuse else _DID[r.kind]).format(n=n)
    shown = ", ".join(str(s) for s in r.slots[:16]) + (" ..." if len(r.slots) > 16 else "")
    ids = f"{unit}(s)" if r.page_size <= 1 else f"page(s) of {r.page_size} slots"
    who = f"; request(s) {', '.join(r.requests[:4])} may have a wrong state" if r.requests else ""
    site = repair_site_sentence(r)
    text = f"The guard {did}; last: {ids} [{shown}] after {r.hook} at iteration {r.seq}{who}."
    return f"{text} {site}" if site else text


def _title(engine: str) -> str:
    try:
        return engine_entry(engine).title
    except UnknownEngine:
        return engine or "The engine"


@dataclass(frozen=True, slots=True)
class GuardRepairs:
    """PoolwatchProbeRepaired, per pool, judged on every snapshot."""

    alerts = (AlertName.PROBE_REPAIRED,)
    mode = Mode.SAMPLED

    def signals(self, seen: Seen) -> list[Signal]:
        """One warning per pool the guard repaired on this rank (this boot)."""
        snap = seen.snap
        if not snap.repairs:
            return []
        by_pool: dict[Pool, list[Repair]] = defaultdict(list)
        for repair in snap.repairs:
            by_pool[repair.pool].append(repair)
        out = []
        for pool, repairs in sorted(by_pool.items(), key=lambda kv: list(Pool).index(kv[0])):
            engine = snap.worker.engine
            text = " ".join(_sentence(r, engine) for r in repairs)
            text += (
                f" {_title(engine)} kept serving; restart the worker at a quiet moment and report the fault "
                "upstream."
            )
            value = float(sum(r.count for r in repairs))
            labels = rank_labels(snap.worker, pool.value)
            repaired = AlertName.PROBE_REPAIRED
            out.append(Signal(repaired, sampled_subject(snap), Severity.WARNING, labels, text, value))
        return out

    def signature(self, seen: Seen) -> tuple[Pool, ...]:
        """The pools a probe snapshot reports (none without the probe)."""
        snap = seen.snap
        return tuple(snap.pools) if snap.probe is not None else ()

    def judged(self, seen: Seen) -> set[Verdict]:
        worker = seen.snap.worker
        return {(AlertName.PROBE_REPAIRED, rank_labels(worker, p.value)) for p in self.signature(seen)}
