"""The evidence one snapshot holds against a pool, gathered per alert and in words: what the books
show (a gap, on which basis) and what the probe's census proved (a tripwire's ids, hook, iteration
and requests, and the line that freed it), with how long the alert must wait for more.  Counts are
in the engine's unit (slots; vLLM's blocks), from the engine registry.  Pure.

A family sorts each finding and tripwire to one of its alerts (or none) and :func:`gather` collects,
per alert and pool, the sentences, the largest count, the wait and the tripwire kinds; the family
then adds what the engine will do next (:mod:`poolwatch.detect.outcome`).  Waits: a surplus, a
tripwire (an identity census is proof) and an exact deficit while fully idle (what an engine's own
idle check is about to see) need no more; another deficit waits ``deficit_samples`` samples, and
coarse figures (or a deficit that crashes nothing, ``patient``) ``coarse_hold`` seconds too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from poolwatch.conservation import Balance, Basis, Finding
from poolwatch.detect.call_site import tripwire_site_sentence
from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.family import where
from poolwatch.detect.outcome import facts, unit_of, units
from poolwatch.model.findings import Tripwire, TripwireKind
from poolwatch.model.rank import Phase, Pool
from poolwatch.model.snapshot import Snapshot
from poolwatch.model.witness import CounterWitness

__all__ = ["Evidence", "finding_sentence", "gather", "id_ranges", "tripwire_sentence", "witness_sentence"]


@dataclass(slots=True)
class Evidence:
    """What one snapshot shows against one pool, for one alert."""

    sentences: list[str] = field(default_factory=list)
    count: int = 0  # the largest count of any finding (the alert's value)
    wait: tuple[int, float] = (1, 0.0)  # samples, and seconds, before it may fire
    kinds: set[TripwireKind] = field(default_factory=set)  # the tripwires that proved it
    requests: list[str] = field(default_factory=list)  # the requests they named, each once


def gather(
    snap: Snapshot,
    found: Mapping[Pool, Finding],
    cfg: DetectorConfig,
    finding_alert: Callable[[Finding], str | None],
    tripwire_alert: Callable[[Tripwire], str | None] = lambda t: None,
    patient: bool = False,
) -> dict[tuple[str, Pool], Evidence]:
    """The evidence per (alert, pool), in (alert, pool) order: each finding ``finding_alert`` sorts
    to an alert, then each tripwire ``tripwire_alert`` does."""
    out: dict[tuple[str, Pool], Evidence] = {}
    for f in found.values():
        alert = finding_alert(f)
        if alert is not None:
            ev = out.setdefault((alert, f.pool), Evidence())
            ev.sentences.append(finding_sentence(f, snap))
            ev.count, ev.wait = max(ev.count, f.slots), _wait(f, snap.phase, cfg, patient)
    for t in snap.tripwires:
        alert = tripwire_alert(t)
        if alert is not None:
            ev = out.setdefault((alert, t.pool), Evidence())
            ev.sentences.append(tripwire_sentence(t, unit_of(snap.worker.engine, t.pool)))
            ev.count, ev.wait = max(ev.count, t.count), (1, 0.0)
            ev.kinds.add(t.kind)
            ev.requests.extend(r for r in t.requests if r not in ev.requests)
    return dict(sorted(out.items()))


def _wait(f: Finding, phase: Phase, cfg: DetectorConfig, patient: bool) -> tuple[int, float]:
    if f.balance is Balance.SURPLUS:
        return (1, 0.0)
    if patient:
        return (cfg.deficit_samples, cfg.coarse_hold)
    if f.basis is Basis.EXACT and phase is Phase.IDLE:
        return (1, 0.0)
    return (cfg.deficit_samples, 0.0 if f.basis is Basis.EXACT else cfg.coarse_hold)


def _basis(basis: Basis, title: str) -> str:
    if basis is Basis.EXACT:
        return "exact figures from the in-process probe"
    if basis is Basis.NEGATIVE_USED:
        return f"{title}'s own used count is negative"
    return "residual while fully idle, from coarse figures"


def finding_sentence(f: Finding, snap: Snapshot) -> str:
    """``The mamba pool of prefill-0 (...) counts 1 slot twice (gap -1): a double free [basis, ...].``"""
    entry = facts(snap.worker.engine)
    unit = unit_of(snap.worker.engine, f.pool)
    bound = "at least " if f.basis is Basis.NEGATIVE_USED else ""
    if f.balance is Balance.SURPLUS:
        what = f"counts {bound}{units(f.slots, unit)} twice (gap {f.gap}): a double free"
    else:
        what = f"has lost {units(f.slots, unit)} (gap +{f.gap}): a leak"
    basis = _basis(f.basis, entry.title)
    return f"The {f.pool.value} pool of {where(snap)} {what} [{basis}, iteration {snap.seq}]."


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


def tripwire_sentence(t: Tripwire, unit: str) -> str:
    """``Tripwire free_and_live: 1 slot [452] first seen after <hook> at iteration 411, requests [...].``
    and the call site's sentence when the probe caught the line (:mod:`.call_site`)."""
    shown = id_ranges(t.slots)
    if t.count > len(t.slots):
        shown += f" (the first {len(t.slots)} named)"
    requests = f", requests [{', '.join(t.requests[:8])}{' ...' if len(t.requests) > 8 else ''}]"
    ids = units(t.count, unit) if t.page_size <= 1 else f"{units(t.count, 'page')} of {t.page_size} slots"
    site = tripwire_site_sentence(t)
    return (
        f"Tripwire {t.kind.value}: {ids} [{shown}] first seen after "
        f"{t.first_seen_hook} at iteration {t.seq}{requests if t.requests else ''}."
        + (f" {_UNRELEASED}" if t.kind is TripwireKind.UNRELEASED else "")
        + (f" {site}" if site else "")
    )


_UNRELEASED = (
    "They are allocated to the running request(s) named, past the allocation their own books record "
    "(the length their release frees up to, or the end of their request row): no release will free them, "
    "so they are lost when those requests finish (or allocate again), whatever else happens."
)


def witness_sentence(w: CounterWitness, unit: str) -> str:
    """``The engine's tree_cache.protected_size() reads 41 slots; the census counts 0 (drift +41),
    off since iteration 9.``"""
    since = "" if w.since_seq == w.seq else f", off since iteration {w.since_seq}"
    return (
        f"{w.counter} ({w.figure}) reads {units(w.reported, unit)}; the census counts {w.census} from the "
        f"ids (drift {w.drift:+d}) at iteration {w.seq}{since}."
    )
