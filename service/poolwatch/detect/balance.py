"""The pool-balance family: what one snapshot shows about its pools' conservation, as
PoolwatchDoubleFree and PoolwatchSlotLeak signals and verdicts.  Pure.

The arithmetic is :func:`poolwatch.conservation.assess`, read through the snapshot's memoised
:func:`~poolwatch.conservation.findings`; this module only decides which alert a finding
raises, how soon, how severe, and says so in a sentence with the figures:

* a surplus (exact gap < 0, or a coarse used count < 0) -> PoolwatchDoubleFree, critical, at once;
* a probe tripwire naming slot ids in a free list twice / while owned -> PoolwatchDoubleFree at once;
  a ``missing`` tripwire (an id in no list) -> PoolwatchSlotLeak at once;
* a deficit (exact gap > 0, or an idle residual from coarse figures) -> PoolwatchSlotLeak after
  ``deficit_samples`` samples (coarse: also ``coarse_hold`` seconds; exact while fully idle: at
  once, since that is what SGLang's own idle check is about to see); critical when SGLang's idle
  check is strict (``True`` or unknown, the default: the server dies at its next idle moment) or
  the deficit is at least ``large_leak_fraction`` of the pool, else warning.

The HiCache ``host`` pool raises PoolwatchHostPoolGap instead (one alert for both signs): SGLang
checks no host conservation, so its idle check never crashes on it; a surplus (a host slot free
and on a node) is critical at once, a deficit a warning after ``deficit_samples``.

A snapshot is a verdict on both alerts of every pool whose balance it can tell (a known gap, or a
tripwire naming it); pools it cannot tell (coarse figures while busy) leave their alerts be.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from poolwatch.conservation import Balance, Basis, Finding
from poolwatch.detect.alert import Signal, Verdict, rank_labels, sampled_subject
from poolwatch.detect.call_site import tripwire_site_sentence
from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.family import Seen, crash_imminent, where
from poolwatch.detect.schema import AlertName, Mode, Severity
from poolwatch.model.findings import LEAK_KINDS, Tripwire
from poolwatch.model.rank import Phase, Pool
from poolwatch.model.snapshot import Snapshot

__all__ = ["PoolBalance"]

_TROUBLE = (Balance.SURPLUS, Balance.DEFICIT)
_UNKNOWN = Balance.UNKNOWN  # looked up once: an enum member is a descriptor lookup on Python 3.11


@dataclass(frozen=True, slots=True)
class PoolBalance:
    """PoolwatchDoubleFree and PoolwatchSlotLeak, per pool, judged on every snapshot."""

    config: DetectorConfig
    alerts = (AlertName.DOUBLE_FREE, AlertName.SLOT_LEAK, AlertName.HOST_POOL_GAP)
    mode = Mode.SAMPLED

    def signals(self, seen: Seen) -> list[Signal]:
        """One signal per alert and pool in trouble (none is built for a balanced snapshot)."""
        snap, found = seen.snap, seen.findings
        if snap.tripwires:
            return _signals(snap, found, self.config)
        for finding in found.values():
            if finding.balance in _TROUBLE:
                return _signals(snap, found, self.config)
        return []

    def signature(self, seen: Seen) -> tuple[tuple[Pool, ...], tuple[Pool, ...]]:
        """The pools whose balance ``seen`` can tell, and the pools its tripwires name."""
        known = tuple([pool for pool, f in seen.findings.items() if f.balance is not _UNKNOWN])
        return known, tuple([t.pool for t in seen.snap.tripwires])

    def judged(self, seen: Seen) -> set[Verdict]:
        known, tripped = self.signature(seen)
        worker = seen.snap.worker
        return {(alert, rank_labels(worker, p.value)) for p in {*known, *tripped} for alert in _alerts_of(p)}


_HOST_ALERTS = (AlertName.HOST_POOL_GAP,)
_DEVICE_ALERTS = (AlertName.DOUBLE_FREE, AlertName.SLOT_LEAK)


def _alerts_of(pool: Pool) -> tuple[AlertName, ...]:
    return _HOST_ALERTS if pool is Pool.HOST else _DEVICE_ALERTS


def _alert_for(balance: Balance, pool: Pool) -> AlertName:
    if pool is Pool.HOST:
        return AlertName.HOST_POOL_GAP
    return AlertName.DOUBLE_FREE if balance is Balance.SURPLUS else AlertName.SLOT_LEAK


# tripwires that prove slots lost (SlotLeak, model.LEAK_KINDS); every other kind proves a slot
# counted twice (DoubleFree)
_BASIS = {
    Basis.EXACT: "exact figures from the in-process probe",
    Basis.NEGATIVE_USED: "SGLang's own used count is negative",
    Basis.IDLE_RESIDUAL: "residual while fully idle, from coarse figures",
}


def _plural(n: int, word: str = "slot") -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _finding_sentence(f: Finding, snap: Snapshot) -> str:
    bound = "at least " if f.basis is Basis.NEGATIVE_USED else ""
    if f.balance is Balance.SURPLUS:
        what = f"counts {bound}{_plural(f.slots)} twice (gap {f.gap}): a double free"
    else:
        what = f"has lost {_plural(f.slots)} (gap +{f.gap}): a leak"
    return f"The {f.pool.value} pool of {where(snap)} {what} [{_BASIS[f.basis]}, iteration {snap.seq}]."


def id_ranges(ids: Iterable[int], limit: int = 16) -> str:
    """Sorted ids as runs, ``3, 7-9, 12``; past ``limit`` runs, ``...`` (the count says how many)."""
    runs: list[list[int]] = []
    for i in sorted(set(ids)):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    shown = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs[:limit])
    return shown + (" ..." if len(runs) > limit else "")


def _tripwire_sentence(t: Tripwire) -> str:
    shown = id_ranges(t.slots)
    if t.count > len(t.slots):
        shown += f" (the first {len(t.slots)} named)"
    requests = f", requests [{', '.join(t.requests[:8])}{' ...' if len(t.requests) > 8 else ''}]"
    ids = _plural(t.count) if t.page_size <= 1 else f"{_plural(t.count, 'page')} of {t.page_size} slots"
    site = tripwire_site_sentence(t)
    return (
        f"Tripwire {t.kind.value}: {ids} [{shown}] first seen after "
        f"{t.first_seen_hook} at iteration {t.seq}{requests if t.requests else ''}."
        + (f" {site}" if site else "")
    )


def _consequence(snap: Snapshot, alert: str) -> str:
    if alert == AlertName.HOST_POOL_GAP:
        return (
            "SGLang checks no HiCache host conservation, so it will not crash on this; a host slot "
            "counted twice can be overwritten while a cached prefix still points at it."
        )
    if crash_imminent(snap):
        return "SGLang's idle check is strict on this rank: the server will crash at its next idle moment."
    if alert == AlertName.DOUBLE_FREE:
        return "Two requests can be handed the same slot and silently corrupt each other's state."
    return "SGLang's idle check only warns here: capacity shrinks until the worker restarts."


def _severity(
    alert: str, snap: Snapshot, slots: int, size: int | None, cfg: DetectorConfig, surplus: bool
) -> Severity:
    if alert == AlertName.HOST_POOL_GAP:
        return Severity.CRITICAL if surplus else Severity.WARNING
    if alert == AlertName.DOUBLE_FREE or crash_imminent(snap):
        return Severity.CRITICAL
    if size and slots >= cfg.large_leak_fraction * size:
        return Severity.CRITICAL
    return Severity.WARNING


def _signals(snap: Snapshot, found: Mapping[Pool, Finding], cfg: DetectorConfig) -> list[Signal]:
    """DoubleFree / SlotLeak signals of every pool of ``snap`` (one per alert and pool)."""
    parts: dict[tuple[str, Pool], list[str]] = defaultdict(list)
    slots: dict[tuple[str, Pool], int] = defaultdict(int)
    waits: dict[tuple[str, Pool], tuple[int, float]] = {}
    for f in found.values():
        if f.balance in (Balance.SURPLUS, Balance.DEFICIT):
            key = (_alert_for(f.balance, f.pool), f.pool)
            parts[key].append(_finding_sentence(f, snap))
            slots[key] = max(slots[key], f.slots)
            waits[key] = _wait(f, snap.phase, cfg)
    for t in snap.tripwires:
        key = (AlertName.SLOT_LEAK if t.kind in LEAK_KINDS else AlertName.DOUBLE_FREE, t.pool)
        parts[key].append(_tripwire_sentence(t))
        slots[key] = max(slots[key], t.count)
        waits[key] = (1, 0.0)  # an identity census is proof: no need to wait
    return [
        _signal(snap, found, alert, pool, parts[alert, pool], slots[alert, pool], waits[alert, pool], cfg)
        for alert, pool in sorted(parts)
    ]


def _wait(f: Finding, phase: Phase, cfg: DetectorConfig) -> tuple[int, float]:
    """How long a finding must persist: a surplus is proof at once, and so is an exact deficit
    while fully idle (nothing is in flight: it is what SGLang's own check is about to see).  A host
    deficit crashes nothing and SGLang's idle check never looks at it: it waits the coarse hold too,
    as the rule's ``for:`` does."""
    if f.pool is Pool.HOST and f.balance is Balance.DEFICIT:
        return (cfg.deficit_samples, cfg.coarse_hold)
    if f.balance is Balance.SURPLUS or (f.basis is Basis.EXACT and phase is Phase.IDLE):
        return (1, 0.0)
    return (cfg.deficit_samples, 0.0 if f.basis is Basis.EXACT else cfg.coarse_hold)


def _signal(
    snap: Snapshot,
    found: Mapping[Pool, Finding],
    alert: str,
    pool: Pool,
    sentences: Iterable[str],
    slots: int,
    wait: tuple[int, float],
    cfg: DetectorConfig,
) -> Signal:
    account = snap.pools.get(pool)
    size = account.size if account is not None else None
    text = " ".join([*sentences, _consequence(snap, alert)])
    surplus = (finding := found.get(pool)) is not None and finding.balance is Balance.SURPLUS
    severity = _severity(alert, snap, slots, size, cfg, surplus)
    labels = rank_labels(snap.worker, pool.value)
    return Signal(alert, sampled_subject(snap), severity, labels, text, float(slots), wait[0], wait[1])
