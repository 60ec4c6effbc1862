"""The repair family: what the probe's opt-in guard repaired, as PoolwatchProbeRepaired.  Pure.

A snapshot from a probe with ``POOLWATCH_PROBE_GUARD=1`` carries one
:class:`~poolwatch.model.findings.Repair` per pool and kind (a running count plus the last action's slot
ids, hook, iteration and requests).  Any repair is a warning, per pool, for as long as the probe's
boot lasts: the worker kept serving, but a fault happened, the state of the requests named may be
wrong, and the worker should be restarted at a quiet moment (runbook PoolwatchProbeRepaired).
A probe snapshot is a verdict on the repair alert of every pool it reports.  Counts are in the
engine's unit (the registry's: slots, or vLLM's blocks); what a refusal refused depends on the unit
(a slot is still owned; a block, ref-counted, is already free or still listed by a request).
"""

from __future__ import annotations

from poolwatch.detect import promql as q
from poolwatch.detect.call_site import repair_site_sentence
from poolwatch.detect.config import MixinConfig
from poolwatch.detect.family import Family, held, uses
from poolwatch.detect.pool_judge import PoolJudge, Said
from poolwatch.detect.schema import AlertDef, Mode, Scope, Severity
from poolwatch.engines import EngineEntry
from poolwatch.model.findings import Repair, RepairKind
from poolwatch.model.rank import Pool
from poolwatch.model.snapshot import Snapshot

__all__ = ["FAMILY", "PROBE_REPAIRED", "GuardRepairs"]

PROBE_REPAIRED = "PoolwatchProbeRepaired"
_DID = {
    RepairKind.QUARANTINE: "took {n} off the free list (a live request or the tree owns it)",
    RepairKind.DEDUPLICATE: "removed duplicate free-list entries worth {n}",
    RepairKind.RETURN: "gave back {n} lost at idle (in no free list, tree or request)",
    RepairKind.REFUSE: (
        "refused to free {n} still owned or already free (a live request's, a tree node's, "
        "a released request row's)"
    ),
}
# a ref-counted block pool's guard refuses inside the pool's free: the block is already free, or a
# request still lists it
_REFUSE_BLOCK = "refused to free {n} already free or still listed by a request (a double or premature free)"


def _sentence(r: Repair, unit: str) -> str:
    """Counts are in the pool's unit (the unit of its gap); ids are unit ids, or page ids of
    ``page_size`` slots each on a paged free list, and the sentence says which."""
    n = f"{r.count} {unit}" + ("" if r.count == 1 else "s")
    refuse = unit == "block" and r.kind is RepairKind.REFUSE
    did = (_REFUSE_BLOCK if refuse else _DID[r.kind]).format(n=n)
    shown = ", ".join(str(s) for s in r.slots[:16]) + (" ..." if len(r.slots) > 16 else "")
    ids = f"{unit}(s)" if r.page_size <= 1 else f"page(s) of {r.page_size} slots"
    who = f"; request(s) {', '.join(r.requests[:4])} may have a wrong state" if r.requests else ""
    site = repair_site_sentence(r)
    text = f"The guard {did}; last: {ids} [{shown}] after {r.hook} at iteration {r.seq}{who}."
    return f"{text} {site}" if site else text


class GuardRepairs(PoolJudge[Repair]):
    """The family's judge: every snapshot of a rank-source (no threshold of its own)."""

    ALERT = PROBE_REPAIRED

    def found(self, snap: Snapshot) -> tuple[Repair, ...]:
        return snap.repairs

    def say(self, snap: Snapshot, entry: EngineEntry, pool: Pool, found: list[Repair]) -> Said:
        """One warning per pool the guard repaired on this rank (this boot)."""
        said = " ".join(_sentence(r, entry.unit) for r in found)
        restart = "restart the worker at a quiet moment and report the fault upstream."
        text = f"{said} {entry.title} kept serving; {restart}"
        return Severity.WARNING, text, float(sum(r.count for r in found))


def alerts(config: MixinConfig) -> tuple[AlertDef, ...]:
    return (
        AlertDef(
            PROBE_REPAIRED,
            Scope.POOL,
            Mode.SAMPLED,
            "The probe's guard repaired a free list or refused a wrong free; the engine kept serving.",
            "Guard mode (opt-in) quarantined a free-listed slot that was in use, removed a duplicate "
            "free-list entry, gave back a slot lost at idle, or refused a wrong free before it ran (an "
            "SGLang Mamba slot still owned, a vLLM block already free or still listed). Fires at once, "
            "until the worker restarts.",
            (
                held(
                    Severity.WARNING,
                    "sum without (kind) (poolwatch_probe_repairs_total) > 0",
                    f"The poolwatch guard on {q.WHERE} repaired {{{{ $value }}}} slot(s) of the "
                    "{{ $labels.pool }} pool. The engine kept serving; restart the worker at a quiet moment.",
                    config.detector,
                ),
            ),
        ),
    )


FAMILY = Family(
    name="repairs",
    title="Guard repairs",
    about="What the probe's opt-in guard repaired or refused in a pool's free list while the engine kept "
    "serving.",
    metrics=uses("poolwatch_probe_repairs_total"),
    alerts=alerts,
    sampled=GuardRepairs,
)
