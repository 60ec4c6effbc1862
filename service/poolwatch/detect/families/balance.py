"""The pool-balance family: PoolwatchDoubleFree and PoolwatchSlotLeak, per device pool.  Pure.

A finding (:func:`poolwatch.conservation.findings`) or a tripwire raises an alert with the figures
(:mod:`poolwatch.detect.evidence`) and what the engine will do next (:mod:`poolwatch.detect.outcome`):

* a surplus (exact gap < 0, or a coarse used count < 0) or a tripwire naming ids twice, while owned
  or below zero -> PoolwatchDoubleFree, critical, at once;
* a lost id (``missing``, ``ref_above_owners``) -> PoolwatchSlotLeak at once; a deficit (exact
  gap > 0, or an idle residual from coarse figures) after ``deficit_samples`` samples (coarse: also
  ``coarse_hold`` s; exact while fully idle: at once); critical where the engine's strict idle
  check will kill the rank (SGLang's, unless relaxed) or the deficit is at least
  ``large_leak_fraction`` of the pool, else a warning (an engine with no idle check never dies of it).

Where the probe's census found an engine counter off (a counter witness, :mod:`.counters`), the
pool's figures are already the census's; the text says so, naming the counter.

The rules say the same: one set for the engines with an idle check (and ranks whose engine is not
known yet, read as the default), one per engine without (its title and unit from the registry).
The HiCache host pool is :mod:`.host_pool`'s.  A snapshot is a verdict on both alerts of every
device pool it can tell (a known gap) and every pool a tripwire names; the others are left be.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from poolwatch.conservation import Balance, Finding
from poolwatch.detect import promql as q
from poolwatch.detect.alert import Signal, Verdict, rank_labels, sampled_subject
from poolwatch.detect.config import DetectorConfig, MixinConfig
from poolwatch.detect.evidence import Evidence, gather, witness_sentence
from poolwatch.detect.family import Family, Seen, uses
from poolwatch.detect.outcome import (
    CHECKERS,
    UNCHECKED,
    crash_imminent,
    double_free_outcome,
    encoder_outcome,
    leak_outcome,
    unit_of,
)
from poolwatch.detect.schema import AlertDef, Mode, PromRule, Scope, Severity
from poolwatch.engines import EngineEntry
from poolwatch.model.findings import LEAK_KINDS, TIMING_KINDS, Tripwire
from poolwatch.model.rank import Pool
from poolwatch.model.snapshot import Snapshot

__all__ = ["DOUBLE_FREE", "FAMILY", "SLOT_LEAK", "PoolBalance"]

DOUBLE_FREE = "PoolwatchDoubleFree"
SLOT_LEAK = "PoolwatchSlotLeak"
_TROUBLE = (Balance.SURPLUS, Balance.DEFICIT)
_UNKNOWN = Balance.UNKNOWN  # looked up once: an enum member is a descriptor lookup on Python 3.11
_HOST = Pool.HOST
_ALERTS = (DOUBLE_FREE, SLOT_LEAK)


@dataclass(frozen=True, slots=True)
class PoolBalance:
    """The family's judge: every snapshot of a rank-source."""

    config: DetectorConfig

    def signals(self, seen: Seen) -> list[Signal]:
        """One signal per alert and pool in trouble (none is built for a balanced snapshot)."""
        snap, found = seen.snap, seen.findings
        if snap.tripwires or any(f.balance in _TROUBLE and f.pool is not _HOST for f in found.values()):
            return _signals(snap, found, self.config)
        return []

    def signature(self, seen: Seen) -> tuple[tuple[Pool, ...], tuple[Pool, ...]]:
        """The device pools whose balance ``seen`` can tell, and the pools its tripwires name."""
        known = tuple([p for p, f in seen.findings.items() if f.balance is not _UNKNOWN and p is not _HOST])
        return known, tuple([t.pool for t in seen.snap.tripwires])

    def judged(self, seen: Seen) -> set[Verdict]:
        known, tripped = self.signature(seen)
        worker = seen.snap.worker
        return {(alert, rank_labels(worker, p.value)) for p in {*known, *tripped} for alert in _ALERTS}


def _signals(snap: Snapshot, found: Mapping[Pool, Finding], cfg: DetectorConfig) -> list[Signal]:
    evidence = gather(snap, found, cfg, _finding_alert, _tripwire_alert)
    return [_signal(snap, alert, pool, ev, cfg) for (alert, pool), ev in evidence.items()]


def _finding_alert(f: Finding) -> str | None:
    if f.pool is _HOST or f.balance not in _TROUBLE:
        return None
    return DOUBLE_FREE if f.balance is Balance.SURPLUS else SLOT_LEAK


def _tripwire_alert(t: Tripwire) -> str | None:
    if t.kind in TIMING_KINDS:  # freed too early, not twice: :mod:`.in_flight`'s
        return None
    return SLOT_LEAK if t.kind in LEAK_KINDS else DOUBLE_FREE


def _signal(snap: Snapshot, alert: str, pool: Pool, ev: Evidence, cfg: DetectorConfig) -> Signal:
    account = snap.pools.get(pool)
    size = account.size if account is not None else None
    large = bool(size) and ev.count >= cfg.large_leak_fraction * (size or 0)
    if pool is Pool.ENCODER:  # no request shares a slot, no idle check looks: the budget's words
        double = alert == DOUBLE_FREE
        severity = Severity.CRITICAL if double or large else Severity.WARNING
        outcome = encoder_outcome(snap, double)
    elif alert == DOUBLE_FREE:
        severity, outcome = Severity.CRITICAL, double_free_outcome(snap, ev.kinds, ev.requests)
    else:
        severity = Severity.CRITICAL if crash_imminent(snap) or large else Severity.WARNING
        outcome = leak_outcome(snap, large)
    judged = [w for w in snap.witnesses if w.pool is pool]
    if judged:  # the figures are the census's, not the engine counters': say which and why
        unit = unit_of(snap.worker.engine, pool)
        said = " ".join(witness_sentence(w, unit) for w in judged)
        ev.sentences.append(f"The pool is judged from the probe's census, not the engine's counters: {said}")
    text = " ".join([*ev.sentences, outcome])
    labels = rank_labels(snap.worker, pool.value)
    return Signal(alert, sampled_subject(snap), severity, labels, text, float(ev.count), *ev.wait)


# --- the Prometheus rules ----------------------------------------------------------------------------

_POOL_ON = f"{{{{ $labels.pool }}}} pool on {q.WHERE}"
# vLLM's encoder cache (multimodal and encoder-decoder models) is judged by the same rules, in the
# budget's words: no request shares an encoder slot and no idle check looks at it
_ENCODER_TWICE = (
    f"{{{{ $value }}}} encoder-cache slot(s) on {q.WHERE} are counted free twice: the encoder-cache budget "
    "exceeds the cache, so admission stops limiting encoder inputs and an encoder output can be evicted or "
    "overwritten while a request still reads it. Nothing in the engine checks this. Drain and restart the "
    "worker."
)
_ENCODER_LOST = (
    f"{{{{ $value }}}} encoder-cache slot(s) on {q.WHERE} are lost: no request references them at idle, so "
    "fewer encoder inputs fit, and multimodal requests wait longer, until the worker restarts."
)


def _per_pool(text: str, encoder: str) -> str:
    """``text``, or ``encoder`` when the alert is about the encoder cache (a Go template branch)."""
    return f'{{{{ if eq $labels.pool "encoder" }}}}{encoder}{{{{ else }}}}{text}{{{{ end }}}}'


def _double_free_rule(e: EngineEntry, config: MixinConfig) -> PromRule:
    """An engine with no idle check: critical; an assertion ahead only for a count below zero."""
    u, engine = e.unit, q.on_engines((e,), config.cluster_label)
    text = (
        f"{{{{ $value }}}} {u}(s) of the {_POOL_ON} are counted twice (a double free): a {u} counted twice "
        f"can go to a new request while another still uses it, and both requests' outputs are corrupted; "
        f"a {u} whose reference count went below zero fails {e.title}'s assertion when it is next allocated, "
        f"and the engine exits with every request in flight. {e.title} has no idle check of its own. Drain "
        "and restart the worker."
    )
    keep = q.duration(config.detector.resolve_hold)
    text = _per_pool(text, _ENCODER_TWICE)
    return PromRule(Severity.CRITICAL, f"({q.DOUBLE_FREE})\n{engine}", "0s", text, keep, e.name)


def _double_free(config: MixinConfig) -> AlertDef:
    keep, cl = q.duration(config.detector.resolve_hold), config.cluster_label
    twice = f"{{{{ $value }}}} slot(s) of the {_POOL_ON} are counted twice (a double free)"
    text = f"{twice}. Drain and restart the worker."
    checked = PromRule(Severity.CRITICAL, q.apart(q.DOUBLE_FREE, UNCHECKED, cl), "0s", text, keep)
    return AlertDef(
        DOUBLE_FREE,
        Scope.POOL,
        Mode.SAMPLED,
        "A memory-pool slot was freed twice; two requests can share it and corrupt each other's output.",
        "Surplus: more slots are accounted free/cached than the pool has, or the probe saw a slot in a "
        "free list twice, while still owned, or with a reference count below zero. Fires at once.",
        (checked, *(_double_free_rule(e, config) for e in UNCHECKED)),
    )


def _leak_rules(e: EngineEntry, config: MixinConfig, deficit: str, large: str) -> tuple[PromRule, ...]:
    """An engine with no idle check: a warning, critical when large; no crash promised."""
    keep, hold, u = q.duration(config.detector.resolve_hold), q.duration(config.detector.coarse_hold), e.unit
    lost = f"{{{{ $value }}}} {u}(s) of the {_POOL_ON} are lost"
    share = f"{config.detector.large_leak_fraction:.0%}"
    warning = (
        f"{lost}: no request holds them and {e.title} will not free them. {e.title} has no idle check of its "
        "own, so nothing will fail: they stay out of use until the worker restarts."
    )
    critical = (
        f"{lost}, at least {share} of the pool: {e.title} has no idle check of its own and will not fail on "
        "it, but requests wait and are preempted sooner until the worker restarts."
    )
    engine = q.on_engines((e,), config.cluster_label)
    big = _ENCODER_LOST.replace(" are lost:", f" are lost, at least {share} of the cache:")
    critical, warning = _per_pool(critical, big), _per_pool(warning, _ENCODER_LOST)
    return (
        PromRule(Severity.CRITICAL, f"{large}\n{engine}", hold, critical, keep, e.name),
        PromRule(Severity.WARNING, f"({deficit}\n  {engine})\nunless {large}", hold, warning, keep, e.name),
    )


def _slot_leak(config: MixinConfig) -> AlertDef:
    d, cl = config.detector, config.cluster_label
    keep, hold = q.duration(d.resolve_hold), q.duration(d.coarse_hold)
    not_strict, large = q.not_strict(cl), f"({q.DEFICIT} >= {q.large(d)})"
    lost = f"{{{{ $value }}}} slot(s) of the {_POOL_ON} are lost"
    crash = f"({q.DEFICIT}\n  unless {not_strict})\nor {large}"
    dies = f"{lost}. Unless {CHECKERS}'s idle check is relaxed, the server crashes at its next idle moment."
    warns = f"{lost}; {CHECKERS}'s idle check only warns here, so capacity shrinks until a restart."
    rules = [
        PromRule(Severity.CRITICAL, q.apart(crash, UNCHECKED, cl), hold, dies, keep),
        PromRule(Severity.WARNING, f"({q.DEFICIT}\n  and {not_strict})\nunless {large}", hold, warns, keep),
    ]
    for e in UNCHECKED:
        rules.extend(_leak_rules(e, config, q.DEFICIT, large))
    unchecked = " or ".join(e.title for e in UNCHECKED)
    return AlertDef(
        SLOT_LEAK,
        Scope.POOL,
        Mode.SAMPLED,
        "Memory-pool slots are lost: nobody owns them any more.",
        "Deficit: the pool has fewer slots accounted than its size, for several samples in a row. "
        f"Critical when {CHECKERS}'s strict idle check will crash the server, or the leak is large"
        + (f"; {unchecked}, with no idle check, only loses capacity (a warning)." if unchecked else "."),
        tuple(rules),
    )


def alerts(config: MixinConfig) -> tuple[AlertDef, ...]:
    return (_double_free(config), _slot_leak(config))


FAMILY = Family(
    name="balance",
    title="Pool balance",
    about="Whether every slot of a device pool (full, SWA, Mamba, request rows; vLLM's blocks) is accounted "
    "for exactly once: slots counted twice or lost.",
    metrics=uses(
        "poolwatch_pool_conservation_gap_slots",
        "poolwatch_pool_used_slots",
        "poolwatch_pool_tripwire_slots",
        "poolwatch_pool_capacity_slots",
        "poolwatch_idle_check_strict",
        "poolwatch_worker_info",
    ),
    alerts=alerts,
    sampled=PoolBalance,
)
