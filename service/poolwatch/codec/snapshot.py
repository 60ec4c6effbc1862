"""The versioned JSON form of a :class:`~poolwatch.model.snapshot.Snapshot` (probe -> sidecar, API, files).

Pure and stdlib-only: the probe imports it inside SGLang's scheduler process.  ``parse_snapshot``
checks every field and raises :class:`SnapshotFormatError` naming the first bad one, so a broken
payload becomes one readable error instead of a crash further down.  This module writes snapshots
and chooses the parser; the schema, its errors and the field-by-field parser are in
:mod:`poolwatch.codec.schema`, the one-pass parser of the common shape in :mod:`poolwatch.codec.fast`.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from poolwatch.codec.fast import common_snapshot
from poolwatch.codec.schema import (
    FIRST_POOLS,
    MORE_POOLS_KEY,
    RELEASE_KEY,
    SCHEMA,
    SCHEMA_VERSION,
    parse_snapshot_full,
)
from poolwatch.codec.waiting import dump_holds, dump_progress
from poolwatch.limits import DEFAULT_LIMITS, Limits
from poolwatch.model.findings import CallSite, Repair, Tripwire
from poolwatch.model.rank import PoolAccount, WorkerId
from poolwatch.model.snapshot import Incident, Snapshot
from poolwatch.model.witness import CounterWitness

__all__ = ["dump_call_site", "dump_snapshot", "dump_worker", "parse_snapshot"]


def dump_snapshot(snap: Snapshot) -> dict[str, Any]:
    """The JSON-ready dict of a snapshot (schema and version first).  What an older sidecar would
    refuse or not know is written only when there is some, under keys of its own: a pool added
    since schema 1 (:data:`MORE_POOLS_KEY`), holds and progress (:mod:`poolwatch.codec.waiting`)."""
    first = {p.value: _dump_account(a) for p, a in snap.pools.items() if p in FIRST_POOLS}
    more = {p.value: _dump_account(a) for p, a in snap.pools.items() if p not in FIRST_POOLS}
    out = {
        "schema": SCHEMA,
        "version": SCHEMA_VERSION,
        "worker": dump_worker(snap.worker),
        "seq": snap.seq,
        "taken_at": snap.taken_at,
        "phase": snap.phase.value,
        "source": snap.source,
        "boot_id": snap.boot_id,
        "idle_check_strict": snap.idle_check_strict,
        "pools": first,
        "queues": dict(snap.queues),
        "tripwires": [_dump_tripwire(t) for t in snap.tripwires],
        "incidents": [_dump_incident(i) for i in snap.incidents],
        "probe": asdict(snap.probe) if snap.probe is not None else None,
        "repairs": [_dump_repair(r) for r in snap.repairs],
        "final": snap.final,
        **({"witnesses": [_dump_witness(w) for w in snap.witnesses]} if snap.witnesses else {}),
    }
    if more:
        out[MORE_POOLS_KEY] = more
    if snap.holds:
        out["holds"] = dump_holds(snap.holds)
    if snap.progress is not None:
        out["progress"] = dump_progress(snap.progress)
    return out


def dump_worker(w: WorkerId) -> dict[str, Any]:
    """A rank's identity; its release under the wire's name (:data:`RELEASE_KEY`)."""
    out = asdict(w)
    out[RELEASE_KEY] = out.pop("release")
    return out


def _dump_account(a: PoolAccount) -> dict[str, Any]:
    out = asdict(a)
    out["pool"] = a.pool.value
    out["exactness"] = a.exactness.value
    out["unreadable"] = list(a.unreadable)
    return out


def _dump_tripwire(t: Tripwire) -> dict[str, Any]:
    out = {**asdict(t), "kind": t.kind.value, "pool": t.pool.value, "slots": list(t.slots)}
    out["requests"] = list(t.requests)
    if t.page_size == 1:
        del out["page_size"]  # slot ids: the form every earlier sidecar reads
    if t.total <= len(t.slots):
        del out["total"]  # every id named: the form every earlier sidecar reads
    _put_call_site(out, t.call_site)
    return out


def _dump_repair(r: Repair) -> dict[str, Any]:
    out = {**asdict(r), "kind": r.kind.value, "pool": r.pool.value, "slots": list(r.slots)}
    out["requests"] = list(r.requests)
    _put_call_site(out, r.call_site)
    return out


def _dump_witness(w: CounterWitness) -> dict[str, Any]:
    """A counter witness; none: no key (the form every earlier sidecar reads)."""
    return {**asdict(w), "pool": w.pool.value}


def dump_call_site(site: CallSite) -> dict[str, Any]:
    """``{"kind", "seq", "frames": [{"file", "line", "function"}, ...]}``, innermost frame first."""
    frames = [{"file": f.file, "line": f.line, "function": f.function} for f in site.frames]
    return {"kind": site.kind.value, "seq": site.seq, "frames": frames}


def _put_call_site(out: dict[str, Any], site: CallSite | None) -> None:
    """A captured call site under ``call_site``; none: no key (the form every earlier sidecar reads)."""
    if site is None:
        del out["call_site"]
    else:
        out["call_site"] = dump_call_site(site)


def _dump_incident(i: Incident) -> dict[str, Any]:
    pools = [_dump_account(a) for a in i.pools]
    return {"kind": i.kind.value, "message": i.message, "at": i.at, "pools": pools}


def parse_snapshot(raw: object, limits: Limits = DEFAULT_LIMITS) -> Snapshot:
    """Validate and convert a decoded JSON payload; raises :class:`SnapshotFormatError`.

    Every value is bounded and encodable (:mod:`poolwatch.fields`): names without lone
    surrogates and at most 256 characters, integers within 2**53 and figures never negative,
    finite numbers, at most ``limits.max_queues`` queues and ``limits.max_listed`` tripwires,
    repairs or incidents (:mod:`poolwatch.limits`).  A payload of the common shape is built in
    one pass (:mod:`poolwatch.codec.fast`); any other is accepted or refused by
    :func:`parse_snapshot_full`, which names the first bad field."""
    snap = common_snapshot(raw, limits, SCHEMA, SCHEMA_VERSION)
    return snap if snap is not None else parse_snapshot_full(raw, limits)
