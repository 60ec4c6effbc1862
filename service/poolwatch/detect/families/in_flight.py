"""The freed-in-flight family: PoolwatchFreedInFlight, per device pool.  Pure.

A free that is wrong only in *time*: the books balance (every block is counted once, the gap is
zero, nothing is lost), but a block went back to the pool while something still needs it:

* a step still in flight lists it, where a writer outside the step's order (a KV consumer
  connector's load) can refill it before that step is done -- silent KV corruption of both requests
  (vLLM #45357's class: async scheduling or pipeline parallelism with a consumer connector);
* a window's block dropped on a count that includes drafts still in flight: when they are rejected
  the request rolls back and attends over the dropped block (vLLM #47282's class: overlapping steps,
  speculative decoding and a sliding-window or chunked-local group).
* a finished request's blocks freed when one KV transfer it waits for reports while another is
  still pending (vLLM #46240's class: an abort while receiving, beside a connector that also saves).

The probe names it at the free or the drop, with the blocks and the requests
(:mod:`poolwatch.probe.vllm.in_flight`, :mod:`~poolwatch.probe.vllm.rollback`,
:mod:`~poolwatch.probe.vllm.transfers`, tripwire
``freed_in_flight``, its hook telling which); it is never a double free or a leak, and the balance
family leaves it alone (:data:`~poolwatch.model.findings.TIMING_KINDS`).

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
ROLLBACK_HOOK = "remove_skipped_blocks"  # a window's drop (:mod:`poolwatch.probe.vllm.rollback`)
TRANSFER_HOOK = "kv_transfer"  # a transfer's report frees (:mod:`poolwatch.probe.vllm.transfers`)


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
            text = _text(entry.title, entry.unit, pool, where(snap), said, requests, found)
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


def _text(
    title: str, unit: str, pool: Pool, at: str, said: str, requests: list[str], found: list[Tripwire]
) -> str:
    names = f"[{', '.join(requests[:8])}]"
    if all(t.first_seen_hook == ROLLBACK_HOOK for t in found):
        return (
            f"{title} dropped {unit}s of the {pool.value} pool of {at} from a request's sliding window on a "
            f"token count that includes drafts still in flight. {said} Nothing is counted twice or lost, "
            f"but when those drafts are rejected the request rolls back and attends over the dropped "
            f"{unit}s: the requests {names} read the null {unit} or another request's KV (silently wrong "
            "output). Upgrade the engine to a release that drops on the processed count, or turn off "
            "async scheduling or speculative decoding on this model."
        )
    if all(t.first_seen_hook == TRANSFER_HOOK for t in found):
        return (
            f"{title} returned {unit}s of the {pool.value} pool of {at} to its free list when one KV "
            "transfer of a finished request landed, while another it waits for is still pending. "
            f"{said} Nothing is counted twice or lost, but the pending transfer still reads or writes "
            f"those {unit}s: the requests {names} and whichever request gets the {unit}s next may hold "
            "the wrong KV, and the late report can fail the engine's own assertion. Drain the worker; "
            "avoid aborting requests that wait for remote KV beside a connector that also saves them "
            "until the engine is fixed."
        )
    return (
        f"{title} returned {unit}s of the {pool.value} pool of {at} to its free list while a step in "
        f"flight still lists them. {said} Nothing is counted twice or lost, but a KV transfer can "
        f"refill those {unit}s before the step is done: the requests {names} and whichever request "
        f"gets the {unit}s next may read or write the wrong KV (silent corruption). Drain and restart "
        "the worker; upgrade the engine to a release that fences such frees, or turn off async "
        "scheduling beside the connector."
    )


def alerts(config: MixinConfig) -> tuple[AlertDef, ...]:
    return (
        AlertDef(
            FREED_IN_FLIGHT,
            Scope.POOL,
            Mode.SAMPLED,
            "A KV block was freed while a step, a draft rollback or a transfer in flight still needs it.",
            "Freed in flight (timing, not a double free): the probe saw a block go back to the free list "
            "while an in-flight step still listed it, with a writer outside the step's order (a KV "
            "consumer connector), a window's block dropped while a rollback of drafts in flight still "
            "needs it, or a finished request's blocks freed while a transfer it waits for is pending. "
            "The books balance; the KV of the requests named may be corrupt. Fires at once, "
            "until the worker restarts.",
            (
                PromRule(
                    Severity.CRITICAL,
                    f'max without (kind) (poolwatch_pool_tripwire_slots{{kind=~"{_KINDS}"}}) > 0',
                    "0s",
                    f"{{{{ $value }}}} unit(s) of the {{{{ $labels.pool }}}} pool on {q.WHERE} were freed "
                    "while a step in flight, a rollback of its drafts or a pending transfer still needed "
                    "them: the requests' "
                    "KV may be silently corrupt. Drain and restart the worker.",
                    keep_firing_for=q.duration(config.detector.resolve_hold),
                ),
            ),
        ),
    )


FAMILY = Family(
    name="in_flight",
    title="Freed in flight",
    about="Blocks freed while an in-flight step still lists them, where a transfer can refill them first, "
    "dropped while a draft rollback still needs them, or freed while a transfer is pending (a free wrong "
    "only in time: the books balance).",
    metrics=uses("poolwatch_pool_tripwire_slots"),
    alerts=alerts,
    sampled=FreedInFlight,
)
