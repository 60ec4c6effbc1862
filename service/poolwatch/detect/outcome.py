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

An engine name no entry has (a snapshot from a newer probe) gets the most careful reading: no idle
check, so no crash promised, and its units called slots.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence

from poolwatch.engines import EngineEntry, UnknownEngine, engine_entry
from poolwatch.model.findings import TripwireKind
from poolwatch.model.rank import Pool
from poolwatch.model.snapshot import Snapshot

__all__ = [
    "crash_imminent",
    "double_free_outcome",
    "encoder_outcome",
    "facts",
    "leak_outcome",
    "unit_of",
    "units",
]

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
