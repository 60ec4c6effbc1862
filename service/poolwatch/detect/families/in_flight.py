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
ROLLBACK_HOOK = "remove_skipped_blocks"  # a window's drop (:mod:`poolwatch.probe.vllm.rollback`)
TRANSFER_HOOK = "kv_transfer"  # a transfer's report frees (:mod:`poolwatch.probe.vllm.transfers`)


class FreedInFlight(PoolJudge[Tripwire]):
    """The family's judge: every snapshot of a rank-source."""

    ALERT = FREED_IN_FLIGHT

    def found(self, snap: Snapshot) -> list[Tripwire]:
        return [t for t in snap.tripwires if t.kind in TIMING_KINDS]

    def say(self, snap: Snapshot, entry: EngineEntry, pool: Pool, found: list[Tripwire]) -> Said:
        said = " ".join(tripwire_sentence(t, entry.unit) for t in found)
        requests = list(dict.fromkeys(r for t in found for r in t.requests))
        text = _text(entry.title, entry.unit, pool, where(snap), said, requests, found)
        return Severity.CRITICAL, text, float(max(t.count for t in found))


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
                held(
                    Severity.CRITICAL,
                    f'max without (kind) (poolwatch_pool_tripwire_slots{{kind=~"{_KINDS}"}}) > 0',
                    f"{{{{ $value }}}} unit(s) of the {{{{ $labels.pool }}}} pool on {q.WHERE} were freed "
                    "while a step in flight, a rollback of its drafts or a pending transfer still needed "
                    "them: the requests' KV may be silently corrupt. Drain and restart the worker.",
                    config.detector,
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
