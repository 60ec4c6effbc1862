"""What a decoded snapshot weighs in the sidecar's memory, and how it is made lighter.  Pure.

The schema bounds a snapshot's *size* (a 4 MiB body, 1,024 findings of 4,096 ids each), not what
the sidecar *keeps*: a 3.7 MB body of slot ids is some 19 MB of Python objects, and a sidecar that
kept 256 of them per rank (its history) grew by gigabytes.  :func:`weight` estimates, from the
snapshot's own lists, the bytes it holds (a little more than it does: an id as a 28-byte ``int``
plus its 8-byte slot, a text as a 49-byte ``str`` plus its characters), so the store can hold its
histories to a byte budget (:mod:`poolwatch.sidecar.store`).

:func:`compact` makes a snapshot over a budget lighter, shedding only what names, never what
counts: each finding (tripwire or guard action) keeps fewer of the ids and requests it names
(halved in turn, down to :data:`FLOOR_IDS` ids and :data:`FLOOR_REQUESTS` requests; its count
stays exact: a tripwire's ``total`` says how many ids it covers), a log incident keeps the first
:data:`FLOOR_MESSAGE` characters of its message, and when that is not enough the findings of one
kind on one pool are merged into one (their ids named together, their counts added; the first
one's hook and iteration kept).  What the alerts, metrics and the rules read -- every pool's
figures, each kind's count on each pool, each incident -- is the same before and after.
"""

from __future__ import annotations

from dataclasses import replace

from poolwatch.model.findings import CallSite, Repair, Tripwire
from poolwatch.model.snapshot import Incident, Snapshot

__all__ = ["FLOOR_IDS", "FLOOR_MESSAGE", "FLOOR_REQUESTS", "compact", "weight"]

ID_BYTES = 36  # an int object and its slot in a tuple
TEXT_BYTES = 57  # a str object's header and its slot
FINDING_BYTES = 400
FLOOR_IDS = 8
FLOOR_REQUESTS = 4
FLOOR_MESSAGE = 512

Finding = Tripwire | Repair


def _texts(values: tuple[str, ...] | list[str]) -> int:
    return sum(TEXT_BYTES + len(v) for v in values)


def _site(site: CallSite | None) -> int:
    if site is None:
        return 0
    return 200 + sum(300 + len(f.file) + len(f.function) for f in site.frames)


def _finding(f: Finding) -> int:
    return FINDING_BYTES + ID_BYTES * len(f.slots) + _texts(f.requests) + _site(f.call_site)


def _incident(i: Incident) -> int:
    return 300 + TEXT_BYTES + len(i.message) + 400 * len(i.pools)


def _weigh(snap: Snapshot) -> int:
    w = snap.worker
    total = 2000 + len(w.worker) + len(w.model) + len(w.release) + len(w.instance)
    total += 500 * len(snap.pools) + sum(120 + len(q) for q in snap.queues)
    total += sum(map(_finding, snap.tripwires)) + sum(map(_finding, snap.repairs))
    total += sum(map(_incident, snap.incidents))
    if snap.probe is not None:
        total += 400 + len(snap.probe.last_error)
    return total


def weight(snap: Snapshot) -> int:
    """The bytes ``snap`` holds, estimated from its lists (computed once per snapshot)."""
    return snap.derived("footprint", lambda: _weigh(snap))


def _trimmed(f: Finding, ids: int, requests: int) -> Finding:
    if len(f.slots) <= ids and len(f.requests) <= requests:
        return f
    if isinstance(f, Tripwire):
        return replace(f, slots=f.slots[:ids], requests=f.requests[:requests], total=f.count)
    return replace(f, slots=f.slots[:ids], requests=f.requests[:requests])


def _merged(found: tuple[Finding, ...]) -> tuple[Finding, ...]:
    """One finding per kind and pool: the first one's hook, iteration and site, every one's ids
    and requests named together (as far as :data:`FLOOR_IDS` and :data:`FLOOR_REQUESTS`), their
    counts added."""
    groups: dict[tuple[str, str], list[Finding]] = {}
    for f in found:
        groups.setdefault((f.kind.value, f.pool.value), []).append(f)
    out: list[Finding] = []
    for same in groups.values():
        first = same[0]
        ids = tuple(dict.fromkeys(i for f in same for i in f.slots))[:FLOOR_IDS]
        requests = tuple(dict.fromkeys(r for f in same for r in f.requests))[:FLOOR_REQUESTS]
        count = sum(f.count for f in same)
        if isinstance(first, Tripwire):
            out.append(replace(first, slots=ids, requests=requests, total=count))
        else:
            out.append(replace(first, slots=ids, requests=requests, count=count))
    return tuple(out)


def _with(snap: Snapshot, tripwires: tuple[Finding, ...], repairs: tuple[Finding, ...]) -> Snapshot:
    return replace(snap, tripwires=tripwires, repairs=repairs)  # type: ignore[arg-type]


def compact(snap: Snapshot, limit: int) -> Snapshot:
    """``snap`` itself when it weighs at most ``limit`` bytes; else a lighter copy (see the
    module's docstring), as light as the floors allow."""
    if weight(snap) <= limit:
        return snap
    every: list[Finding] = [*snap.tripwires, *snap.repairs]
    ids = max([len(f.slots) for f in every] or [0])
    requests = max([len(f.requests) for f in every] or [0])
    out = snap
    if snap.incidents and any(len(i.message) > FLOOR_MESSAGE for i in snap.incidents):
        cut = tuple(replace(i, message=i.message[:FLOOR_MESSAGE]) for i in snap.incidents)
        out = replace(out, incidents=cut)
    while weight(out) > limit and (ids > FLOOR_IDS or requests > FLOOR_REQUESTS):
        ids, requests = max(FLOOR_IDS, ids // 2), max(FLOOR_REQUESTS, requests // 2)
        out = _with(
            out,
            tuple(_trimmed(t, ids, requests) for t in out.tripwires),
            tuple(_trimmed(r, ids, requests) for r in out.repairs),
        )
    if weight(out) > limit:
        out = _with(out, _merged(out.tripwires), _merged(out.repairs))
    return out
