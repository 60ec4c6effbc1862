"""What an engine will do next with a finding: the words (and the crash) a page promises, from the
engine registry's facts alone (:mod:`poolwatch.engines`: how the engine is written, what one unit
of its pools is called, whether it checks its own pools when idle).  No engine is named here.  Pure.

* An engine with an idle check of its own (SGLang), strict -- the default, so a rank that did not
  say counts as strict -- dies at its next idle moment on any imbalance: a leak or a double free is
  a crash to come, and pages critical.
* The same check relaxed only warns: a double free still corrupts the requests that share a unit,
  a leak only shrinks the pool until a restart.
* An engine with no idle check (vLLM) never dies of a leak: the lost units stay out of use until
  the worker restarts (a warning; critical when large).  A unit counted twice goes to a new
  request while another still uses it, and both requests' outputs are corrupted; a unit whose
  reference count went below zero (``negative_ref``) fails the engine's assertion when it is next
  allocated, and the engine exits with every request in flight.  No crash at an idle moment is
  ever promised for it.

An engine counter the probe's census found off (:func:`drift_outcome`) is judged the same way: an
engine whose idle check sums that counter finds the pool off at its next idle moment (a crash when
strict); an engine with no idle check trusts a free count above its free queue at the allocation that
drains the queue, and fails its assertion there.

An engine name no entry has (a snapshot from a newer probe) gets the most careful reading: no idle
check, so no crash promised, and its units called slots.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence

from poolwatch.detect.schema import Severity
from poolwatch.engines import ENGINES, EngineEntry, UnknownEngine, engine_entry
from poolwatch.model.findings import TripwireKind
from poolwatch.model.rank import Pool
from poolwatch.model.snapshot import Snapshot
from poolwatch.model.witness import CounterWitness

__all__ = [
    "CHECKED",
    "CHECKERS",
    "UNCHECKED",
    "crash_imminent",
    "double_free_outcome",
    "drift_outcome",
    "encoder_outcome",
    "facts",
    "leak_outcome",
    "unit_of",
    "units",
]

# the rules' engines, by what their own idle check does with an imbalance (dies, or warns, when it
# checks at all), and the checking engines' names in a sentence
CHECKED = tuple(e for e in ENGINES if e.idle_check)
UNCHECKED = tuple(e for e in ENGINES if not e.idle_check)
CHECKERS = " or ".join(e.title for e in CHECKED) or "the engine"

# pools whose unit is not the engine's: a request row (SGLang's req_to_token_pool), an encoder-cache
# slot (vLLM's encoder embeddings)
_POOL_UNITS = {Pool.REQ: "request row", Pool.ENCODER: "encoder-cache slot"}


@functools.lru_cache(maxsize=64)
def facts(engine: str) -> EngineEntry:
    """The registry entry of ``engine``; one without an idle check for a name no entry has."""
    try:
        return engine_entry(engine)
    except UnknownEngine:
        return EngineEntry(engine, engine or "The engine", probe="", unit="slot", idle_check=False)


def crash_imminent(snap: Snapshot) -> bool:
    """Whether the engine's own idle check will kill this rank on an imbalance: the engine has one,
    and it is strict (unknown: the engine's default, strict)."""
    return facts(snap.worker.engine).idle_check and snap.idle_check_strict is not False


def unit_of(engine: str, pool: Pool) -> str:
    """What one unit of ``pool`` is called on ``engine``'s ranks."""
    return _POOL_UNITS.get(pool) or facts(engine).unit


def encoder_outcome(snap: Snapshot, surplus: bool) -> str:
    """What follows an imbalance of vLLM's encoder cache: its budget admits what the cache cannot hold,
    or capacity is gone; no assertion and no idle check look at it."""
    title = facts(snap.worker.engine).title
    if surplus:
        return (
            f"{title}'s encoder-cache budget now exceeds the cache, so its admission control stops limiting "
            "encoder inputs: more encoder outputs are scheduled than the cache holds, and one can be evicted "
            f"or overwritten while a request still reads it. {title} checks nothing here and keeps serving."
        )
    return (
        f"{title} checks nothing here: fewer encoder inputs fit, and multimodal requests wait longer, until "
        "the worker restarts."
    )


def units(n: int, unit: str) -> str:
    """``1 block``, ``2 blocks``."""
    return f"{n} {unit}" if n == 1 else f"{n} {unit}s"


def _crash(entry: EngineEntry) -> str:
    return (
        f"{entry.title}'s idle check is strict on this rank: the server will crash at its next idle moment."
    )


def double_free_outcome(
    snap: Snapshot, kinds: Collection[TripwireKind] = (), requests: Sequence[str] = ()
) -> str:
    """What follows a double free on ``snap``'s rank (``kinds``: the tripwires that proved it;
    ``requests``: the requests they named, which hold the units at risk)."""
    entry = facts(snap.worker.engine)
    if crash_imminent(snap):
        return _crash(entry)
    unit = entry.unit
    if entry.idle_check:
        return f"Two requests can be handed the same {unit} and silently corrupt each other's state."
    held = f" ({', '.join(requests[:4])}{' ...' if len(requests) > 4 else ''})" if requests else ""
    shared = (
        f"A {unit} counted twice can go to a new request while another still uses it{held}: both "
        "requests' outputs are then corrupted."
    )
    if TripwireKind.NEGATIVE_REF in kinds:
        return (
            f"A {unit} whose reference count is below zero fails {entry.title}'s assertion when it is next "
            f"allocated: the engine exits with every request in flight. {shared}"
        )
    return f"{shared} {entry.title} has no idle check of its own: it keeps serving meanwhile."


def leak_outcome(snap: Snapshot, large: bool) -> str:
    """What follows a leak on ``snap``'s rank (``large``: at least the large-leak fraction of its pool)."""
    entry = facts(snap.worker.engine)
    if crash_imminent(snap):
        return _crash(entry)
    if entry.idle_check:
        return f"{entry.title}'s idle check only warns here: capacity shrinks until the worker restarts."
    text = (
        f"{entry.title} has no idle check of its own, so nothing will fail: the lost {entry.unit}s stay out "
        "of use until the worker restarts."
    )
    if large:
        text += " So large a share of the pool lost makes requests wait and be preempted sooner meanwhile."
    return text


def drift_outcome(
    snap: Snapshot, found: Sequence[CounterWitness], judged_gap: int | None
) -> tuple[Severity, int, str]:
    """What follows engine counters the census found off on ``snap``'s rank (one pool's witnesses;
    ``judged_gap``: the pool's gap as the census judges it): the severity, the alert's value (the
    largest drift, in units) and the words.

    An engine whose idle check sums the counters sees the pool as the counters say: off by
    ``judged_gap - sum(drift)`` -- a crash at its next idle moment where that is not zero and the
    check is strict (a counter that drifted alone, #12774), nothing where the drift cancels a real
    imbalance of the ids (#27666: the census's tripwires name those).  A counter below zero fails
    the pool-usage assertion of its pool statistics wherever they check it, strict or not."""
    entry = facts(snap.worker.engine)
    worst = max((abs(w.drift) for w in found), default=0)
    if entry.idle_check:
        return _checked_drift(snap, entry, found, judged_gap, worst)
    above = max((w.drift for w in found if w.figure == "available" and w.drift > 0), default=0)
    if above and all(w.pool is Pool.ENCODER for w in found):
        return (
            Severity.CRITICAL,
            worst,
            f"{entry.title} admits encoder inputs against this free count: above what the cache holds, its "
            "admission check no longer limits the encoder cache, and a burst of multimodal or audio inputs "
            "fills it past the memory it was sized for, until the worker restarts.",
        )
    if above:
        return (
            Severity.CRITICAL,
            worst,
            f"{entry.title}'s allocator trusts this free count: an allocation that takes the last free "
            f"{entry.unit}s walks past the end of the free queue and fails {entry.title}'s assertion, and "
            "the engine exits with every request in flight.",
        )
    return (
        Severity.WARNING,
        worst,
        f"{entry.title} has no idle check of its own: nothing fails for it, but its capacity is counted "
        "wrong until the worker restarts.",
    )


def _checked_drift(
    snap: Snapshot, entry: EngineEntry, found: Sequence[CounterWitness], judged_gap: int | None, worst: int
) -> tuple[Severity, int, str]:
    title, unit = entry.title, entry.unit
    seen = None if judged_gap is None else judged_gap - sum(w.drift for w in found)
    below = [w for w in found if w.reported < 0]
    words = []
    if seen:
        check = "strict on this rank, it crashes the server" if crash_imminent(snap) else "it only warns here"
        words.append(
            f"{title}'s idle check sums these counters: at its next idle moment it finds the pool off by "
            f"{units(abs(seen), unit)} and, {check}."
        )
    elif seen == 0:
        words.append(
            f"{title}'s idle check sums these counters and they balance: the drift hides what the ids show, "
            "and the check sees nothing."
        )
    if below:
        words.append(
            f"{below[0].counter} is below zero: {title}'s pool usage computed from it is negative, which its "
            "pool statistics reject where they check it (a crash at the next metrics or log line)."
        )
    critical = bool(below) or (bool(seen) and crash_imminent(snap))
    return (Severity.CRITICAL if critical else Severity.WARNING), worst, " ".join(words)
