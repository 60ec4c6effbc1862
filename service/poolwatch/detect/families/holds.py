"""The stranded-hold family: PoolwatchStrandedHold, capacity kept by owners whose wait never ends.  Pure.

A hold (:mod:`poolwatch.model.holds`) is capacity an owner keeps while it waits on something outside
the scheduler's step: a finished request whose KV a connector still sends, a request waiting for
remote KV (aborted ones too), a prefix-tree lock awaiting a host copy.  The books balance meanwhile,
so the gap never shows it.  A hold whose oldest owner has waited longer than the engine's own bound
on that wait (the probe reads it from the engine's configuration) plus ``hold_grace`` -- or
``hold_default`` where the engine has none, or ``hold_limit`` for every wait when set -- is
*stranded*: the engine's own backstop did not free it, and nothing will.  From ``hold_min_slots``
stranded slots a pool pages: a warning, critical from ``large_leak_fraction`` of the pool; the text
names the owners past the bound, oldest first.  The age is the snapshot's (``taken_at`` less the
oldest owner's ``since``), so the rule fires at the same snapshot, ``for: 0s``.

A snapshot from a probe that reports progress reports its holds too: it is a verdict on the alert of
every pool it accounts exactly (no hold there: clean); other sources say nothing about holds.
"""

from __future__ import annotations

from poolwatch.detect import promql as q
from poolwatch.detect.alert import Signal, Verdict, rank_labels, sampled_subject
from poolwatch.detect.charts import Chart, Line
from poolwatch.detect.config import DetectorConfig, MixinConfig
from poolwatch.detect.family import Family, Judge, Seen, uses, where
from poolwatch.detect.outcome import facts, units
from poolwatch.detect.schema import AlertDef, Mode, PromRule, Scope, Severity
from poolwatch.detect.stranded import STRANDED_HOLD, HoldThresholds, stranded
from poolwatch.engines import ENGINES
from poolwatch.model.holds import Hold, Holder, HoldReason
from poolwatch.model.rank import Exactness, Pool
from poolwatch.model.snapshot import Snapshot

__all__ = ["FAMILY", "StrandedHolds"]

WAITS_FOR = {
    HoldReason.KV_SEND: "their KV to finish sending",
    HoldReason.KV_RECV: "remote KV to arrive",
    HoldReason.TREE_LOCK: "a host copy to be acknowledged",
}
_NAMED = 4  # owners named in a page
_HOLD = "$ranks {{pool}} {{reason}}"  # a chart's legend


class StrandedHolds(Judge):
    """The family's judge: every snapshot of a rank-source."""

    def signals(self, seen: Seen) -> list[Signal]:
        snap = seen.snap
        if not snap.holds:
            return []
        late = stranded(snap, self.config)
        least = self.config.of(HoldThresholds).hold_min_slots
        totals = {p: sum(h.slots for h in late if h.pool is p) for p in {h.pool: 0 for h in late}}
        return [
            self._signal(snap, p, [h for h in late if h.pool is p], n)
            for p, n in totals.items()
            if n >= least
        ]

    def _signal(self, snap: Snapshot, pool: Pool, holds: list[Hold], total: int) -> Signal:
        cfg = self.config
        account = snap.pools.get(pool)
        size = account.size if account is not None else None
        large = bool(size) and total >= cfg.large_leak_fraction * (size or 0)
        entry = facts(snap.worker.engine)
        sentences = [
            f"{units(total, entry.unit)} of the {pool.value} pool on {where(snap)} are held by owners "
            "waiting past the engine's own bound."
        ]
        sentences += [_hold_sentence(snap, h, cfg, entry.unit) for h in holds]
        sentences.append(
            f"{entry.title} will not free them by itself: they stay out of use, and count against admission, "
            "until what their owners wait for arrives or the worker restarts."
        )
        severity = Severity.CRITICAL if large else Severity.WARNING
        labels = rank_labels(snap.worker, pool.value)
        return Signal(
            STRANDED_HOLD, sampled_subject(snap), severity, labels, " ".join(sentences), float(total)
        )

    def signature(self, seen: Seen) -> tuple[Pool, ...]:
        """The pools whose holds ``seen`` tells (a probe reporting progress, its exact accounts)."""
        snap = seen.snap
        if snap.progress is None:
            return ()
        return tuple([p for p, a in snap.pools.items() if a.exactness is Exactness.EXACT])

    def judged(self, seen: Seen) -> set[Verdict]:
        worker = seen.snap.worker
        return {(STRANDED_HOLD, rank_labels(worker, p.value)) for p in self.signature(seen)}


def _hold_sentence(snap: Snapshot, h: Hold, config: DetectorConfig, unit: str) -> str:
    cfg, age = config.of(HoldThresholds), h.age(snap.taken_at)
    if cfg.hold_limit > 0:
        bound = f"the configured limit of {cfg.hold_limit:g} s"
    elif h.timeout is None:
        bound = f"the default of {cfg.hold_default:g} s (the engine has no bound of its own on this wait)"
    else:
        named = f" ({h.source})" if h.source else ""
        bound = f"the engine's own bound of {h.timeout:g} s{named} and {cfg.hold_grace:g} s of grace"
    late = [n for n in h.named if snap.taken_at - n.since > cfg.bound(h.timeout)][:_NAMED]
    owners = "; ".join(_owner(snap, n, unit) for n in late)
    more = h.owners - len(late)
    listed = f" Past it: {owners}{f' and {more} more' if more > 0 else ''}." if late else ""
    return (
        f"{h.reason.value}: {units(h.slots, unit)} held by {h.owners} owner(s) waiting for "
        f"{WAITS_FOR[h.reason]}; the oldest has waited {age:.0f} s, past {bound}.{listed}"
    )


def _owner(snap: Snapshot, n: Holder, unit: str) -> str:
    aborted = ", aborted" if n.aborted else ""
    return f"'{n.owner}' ({units(n.slots, unit)}{aborted}, {snap.taken_at - n.since:.0f} s)"


# --- the Prometheus rules ----------------------------------------------------------------------------


def _stranded_slots(config: DetectorConfig) -> str:
    """The slots of every hold past its bound, summed per pool (what the detector sums)."""
    d = config.of(HoldThresholds)
    age, timeout = "poolwatch_pool_hold_age_seconds", "poolwatch_pool_hold_timeout_seconds"
    if d.hold_limit > 0:
        late = f"{age} > {d.hold_limit:g}"
    else:
        late = f"{age} > ({timeout} + {d.hold_grace:g})\n    or ({age} > {d.hold_default:g} unless {timeout})"
    return f"sum without (reason) (\n  poolwatch_pool_hold_slots\n  and (\n    {late}\n  )\n)"


def _text(unit: str) -> str:
    return (
        f"{{{{ $value }}}} {unit}(s) of the {{{{ $labels.pool }}}} pool on {q.WHERE} are held by owners "
        "waiting past the engine's own bound (a KV transfer that never completes, a request waiting for KV "
        "that never comes, a tree lock never released): the engine will not free them by itself."
    )


def _rules(severity: Severity, expr: str, config: MixinConfig) -> tuple[PromRule, ...]:
    """One rule for the engines counting in slots (and a rank whose engine is not known yet), one per
    engine counting in another unit (its ``engine`` label set), so each names its own unit."""
    keep, cl = q.duration(config.detector.resolve_hold), config.cluster_label
    others = tuple(e for e in ENGINES if e.unit != "slot")
    rules = [PromRule(severity, q.apart(expr, others, cl), "0s", _text("slot"), keep)]
    for e in others:
        on = q.on_engines((e,), cl)
        rules.append(PromRule(severity, f"({expr})\n{on}", "0s", _text(e.unit), keep, e.name))
    return tuple(rules)


def alerts(config: MixinConfig) -> tuple[AlertDef, ...]:
    d = config.detector
    held = _stranded_slots(d)
    enough = f"({held}) >= {d.of(HoldThresholds).hold_min_slots}"
    large = f"({held}) >= {q.large(d)}"
    return (
        AlertDef(
            STRANDED_HOLD,
            Scope.POOL,
            Mode.SAMPLED,
            "Pool capacity is held by owners whose wait never ends (a stranded KV transfer or lock).",
            "Finished or aborted requests kept for a KV transfer, requests waiting for remote KV, or "
            "prefix-tree locks have held slots longer than the engine's own bound on that wait (plus a "
            "grace): critical when they hold a large share of the pool.",
            (
                *_rules(Severity.CRITICAL, f"({enough})\nand ({large})", config),
                *_rules(Severity.WARNING, f"({enough})\nunless ({large})", config),
            ),
        ),
    )


FAMILY = Family(
    name="holds",
    title="Stranded holds",
    about="Capacity held by owners waiting on a KV transfer or a tree lock longer than the engine's own "
    "bound on that wait: finished or aborted requests kept for a transfer, requests waiting for remote KV, "
    "locks with no live locker.",
    metrics=uses(
        "poolwatch_pool_hold_slots",
        "poolwatch_pool_hold_age_seconds",
        "poolwatch_pool_hold_timeout_seconds",
        "poolwatch_pool_capacity_slots",
        "poolwatch_worker_info",
    ),
    alerts=alerts,
    sampled=StrandedHolds,
    thresholds=HoldThresholds,
    charts=(
        Chart(
            "Held by owners waiting on a transfer or a lock",
            (Line("poolwatch_pool_hold_slots", _HOLD), Line("poolwatch_pool_hold_owners", f"owners {_HOLD}")),
            "slots",
            "Capacity kept by finished requests until their KV is sent (kv_send), by requests waiting for "
            "remote KV (kv_recv) and by tree locks awaiting a host copy (tree_lock); counted as held, so "
            f"it never shows in the gap. Stranded once older than the engine's own bound: {STRANDED_HOLD}.",
        ),
        Chart(
            "Oldest hold's wait against the engine's bound",
            (
                Line("poolwatch_pool_hold_age_seconds", f"age {_HOLD}"),
                Line("poolwatch_pool_hold_timeout_seconds", f"bound {_HOLD}"),
            ),
            "seconds",
            "Seconds the oldest owner of each hold has waited, and the engine's own bound on that wait "
            "(read from its configuration; absent where it has none).",
        ),
    ),
)
