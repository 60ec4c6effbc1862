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

from collections import defaultdict
from dataclasses import dataclass

from poolwatch.detect import promql as q
from poolwatch.detect.alert import Signal, Verdict, rank_labels, sampled_subject
from poolwatch.detect.config import DetectorConfig, MixinConfig
from poolwatch.detect.evidence import tripwire_sentence
from poolwatch.detect.family import Family, Seen, uses, where
from poolwatch.detect.outcome import facts
from poolwatch.detect.schema import AlertDef, Mode, PromRule, Scope, Severity
from poolwatch.model.findings import TIMING_KINDS, Tripwire
from poolwatch.model.rank import Pool

__all__ = ["FAMILY", "FREED_IN_FLIGHT", "FreedInFlight"]

FREED_IN_FLIGHT = "PoolwatchFreedInFlight"
_ORDER = {p: i for i, p in enumerate(Pool)}
_KINDS = "|".join(sorted(k.value for k in TIMING_KINDS))


@dataclass(frozen=True, slots=True)
class FreedInFlight:
    """The family's judge: every snapshot of a rank-source."""

    config: DetectorConfig | None = None  # no threshold of its own: a proof at the free

    def signals(self, seen: Seen) -> list[Signal]:
        snap = seen.snap
        by_pool: dict[Pool, list[Tripwire]] = defaultdict(list)
        for t in snap.tripwires:
            if t.kind in TIMING_KINDS:
                by_pool[t.pool].append(t)
        if not by_pool:
            return []
        entry = facts(snap.worker.engine)
        out = []
        for pool, found in sorted(by_pool.items(), key=lambda kv: _ORDER[kv[0]]):
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
            value = float(max(t.count for t in found))
            labels = rank_labels(snap.worker, pool.value)
            out.append(Signal(FREED_IN_FLIGHT, sampled_subject(snap), Severity.CRITICAL, labels, text, value))
        return out

    def signature(self, seen: Seen) -> tuple[Pool, ...]:
        """The pools a probe snapshot reports (none without the probe)."""
        snap = seen.snap
        return tuple(snap.pools) if snap.probe is not None else ()

    def judged(self, seen: Seen) -> set[Verdict]:
        worker = seen.snap.worker
        return {(FREED_IN_FLIGHT, rank_labels(worker, p.value)) for p in self.signature(seen)}


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
                PromRule(
                    Severity.CRITICAL,
                    f'max without (kind) (poolwatch_pool_tripwire_slots{{kind=~"{_KINDS}"}}) > 0',
                    "0s",
                    f"{{{{ $value }}}} unit(s) of the {{{{ $labels.pool }}}} pool on {q.WHERE} were freed "
                    "while a step in flight still listed them, with a KV transfer able to refill them first: "
                    "the requests' KV may be silently corrupt. Drain and restart the worker.",
                    keep_firing_for=q.duration(config.detector.resolve_hold),
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
