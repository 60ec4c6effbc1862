"""The freed-in-flight family: PoolwatchFreedInFlight, per device pool.  Pure.

A free that is wrong only in *time*: the books balance (every block is counted once, the gap is
zero, nothing is lost), but a block went back to the pool while a step still in flight lists it,
where a writer outside the step's order (a KV consumer connector's load) can refill it before that
step is done -- silent KV corruption of both requests (vLLM #45357's class: async scheduling or
pipeline parallelism with a consumer connector).  The probe names it at the free, with the blocks
and the requests (:mod:`poolwatch.probe.vllm.in_flight`, tripwire ``freed_in_flight``); it is never
a double free or a leak, and the balance family leaves it alone
(:data:`~poolwatch.model.findings.TIMING_KINDS`).

Critical at once (a proof at the free), per pool; it holds until the worker restarts (the tripwire
stays, as every identity proof does: the requests named may already have produced wrong text).
A probe snapshot is a verdict on the alert of every pool it reports.
"""

from __future__ import annotations

from poolwatch.detect import promql as q
from poolwatch.detect.config import MixinConfig
from poolwatch.detect.evidence import tripwire_sentence
from poolwatch.detect.family import Family, held, uses, where
from poolwatch.detect.pool_judge import PoolJudge, Said
from poolwatch.detect.schema import AlertDef, Mode, Scope, Severity
from poolwatch.engines import EngineEntry
from poolwatch.model.findings import TIMING_KINDS, Tripwire
from poolwatch.model.rank import Pool
from poolwatch.model.snapshot import Snapshot

__all__ = ["FAMILY", "FREED_IN_FLIGHT", "FreedInFlight"]

FREED_IN_FLIGHT = "PoolwatchFreedInFlight"
_KINDS = "|".join(sorted(k.value for k in TIMING_KINDS))


class FreedInFlight(PoolJudge[Tripwire]):
    """The family's judge: every snapshot of a rank-source."""

    ALERT = FREED_IN_FLIGHT

    def found(self, snap: Snapshot) -> list[Tripwire]:
        return [t for t in snap.tripwires if t.kind in TIMING_KINDS]

    def say(self, snap: Snapshot, entry: EngineEntry, pool: Pool, found: list[Tripwire]) -> Said:
        said = " ".join(tripwire_sentence(t, entry.unit) for t in found)
        requests = list(dict.fromkeys(r for t in found for r in t.requests))
        text = (
            f"{entry.title} returned {entry.unit}s of the {pool.value} pool of {where(snap)} to its free "
            f"list while a step still in flight lists them. {said} Nothing is counted twice or lost, "
            f"but a KV transfer can refill those {entry.unit}s before the step is done: the requests "
            f"[{', '.join(requests[:8])}] and whichever request gets the {entry.unit}s next may read or "
            "write the wrong KV (silent corruption). Drain and restart the worker; upgrade the engine "
            "to a release that fences such frees, or turn off async scheduling beside the connector."
        )
        return Severity.CRITICAL, text, float(max(t.count for t in found))


def alerts(config: MixinConfig) -> tuple[AlertDef, ...]:
    return (
        AlertDef(
            FREED_IN_FLIGHT,
            Scope.POOL,
            Mode.SAMPLED,
            "A KV block was freed while a step still in flight lists it; a transfer can overwrite it.",
            "Freed in flight (timing, not a double free): the probe saw a block go back to the free list "
            "while an in-flight step still listed it, with a writer outside the step's order (a KV "
            "consumer connector). The books balance; the KV of the requests named may be corrupt. Fires "
            "at once, until the worker restarts.",
            (
                held(
                    Severity.CRITICAL,
                    f'max without (kind) (poolwatch_pool_tripwire_slots{{kind=~"{_KINDS}"}}) > 0',
                    f"{{{{ $value }}}} unit(s) of the {{{{ $labels.pool }}}} pool on {q.WHERE} were freed "
                    "while a step in flight still listed them, with a KV transfer able to refill them first: "
                    "the requests' KV may be silently corrupt. Drain and restart the worker.",
                    config.detector,
                ),
            ),
        ),
    )


FAMILY = Family(
    name="in_flight",
    title="Freed in flight",
    about="Blocks freed while an in-flight step still lists them, where a transfer can refill them first "
    "(a free wrong only in time: the books balance).",
    metrics=uses("poolwatch_pool_tripwire_slots"),
    alerts=alerts,
    sampled=FreedInFlight,
)
