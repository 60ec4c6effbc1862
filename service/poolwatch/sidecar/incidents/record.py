"""One incident as the sidecar keeps it: what was found, where, and the rank's figures around it.  Pure.

An *incident* is one finding the probe proved (a :class:`~poolwatch.model.findings.Tripwire`, kept from
the hook and iteration where it was first seen) or one kind of guard action on one pool (a
:class:`~poolwatch.model.findings.Repair`, growing with every action), on one rank, source and boot.  Its id
is a hash of exactly that, so the same incident seen again -- by the next snapshot, or after a
sidecar restart -- is the same record.

A record keeps only what a bundle may show (:mod:`~poolwatch.sidecar.incidents.redact`): request ids
hashed, no worker, pod or instance name inside the bundle part, no log message, no probe error
text.  The rank's moments (:func:`moment`: iteration, phase, queue lengths, every pool's figures and
gap, the findings by kind and count) are kept around the first sighting: up to
:data:`BEFORE` before it, the first, and up to :data:`AFTER` after it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from poolwatch.codec.snapshot import dump_call_site
from poolwatch.conservation import gap
from poolwatch.model.findings import CallSiteKind, Repair, Tripwire
from poolwatch.model.snapshot import Snapshot
from poolwatch.sidecar.incidents.redact import model_name, request_name

__all__ = ["AFTER", "BEFORE", "INCIDENT_ID", "IncidentRecord", "incident_id", "moment", "new_record"]

BEFORE = 6  # moments kept before the first sighting
AFTER = 6  # moments kept after it
# what one record holds at most, whatever a snapshot lists (the schema allows far more): each
# incident's memory is bounded, and :mod:`.fit` makes it fit its share of the file exactly
MAX_IDS = 1024  # slot ids of the finding named (its count says how many in all)
MAX_REQUESTS = 64  # requests of the finding named (hashed)
MAX_ACTIONS = 16  # guard actions on the finding's pool, each with at most MAX_ACTION_IDS ids
MAX_ACTION_IDS = 64
MAX_QUEUES = 16  # queues of a moment, each name at most QUEUE_NAME characters
QUEUE_NAME = 64
MAX_RANKS_SEEN = 64
_FIGURES = ("size", "available", "evictable", "protected", "held", "session_held", "used")

Found = Tripwire | Repair
INCIDENT_ID = re.compile(r"pw-[0-9a-f]{16}")  # what :func:`incident_id` makes: the only ids served or written


def incident_id(key: str, source: str, boot_id: str, found: Found) -> str:
    """``pw-`` and 16 hex digits of the hash of the rank, source, boot and finding's identity."""
    if isinstance(found, Tripwire):
        parts = ["tripwire", found.kind.value, found.pool.value, found.first_seen_hook, str(found.seq)]
    else:
        parts = ["repair", found.kind.value, found.pool.value]
    text = "\x1f".join([key, source, boot_id, *parts])
    return "pw-" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def moment(snap: Snapshot) -> dict[str, Any]:
    """What the rank looked like in one snapshot (no request id, no message)."""
    pools = {}
    for pool, account in snap.pools.items():
        figures: dict[str, Any] = {f: getattr(account, f) for f in _FIGURES}
        pools[pool.value] = {**figures, "gap": gap(account), "exactness": account.exactness.value}
    return {
        "seq": snap.seq,
        "taken_at": snap.taken_at,
        "phase": snap.phase.value,
        "queues": {k[:QUEUE_NAME]: v for k, v in list(snap.queues.items())[:MAX_QUEUES]},
        "pools": pools,
        "tripwires": _by_kind(snap.tripwires),
        "repairs": _by_kind(snap.repairs),
    }


def _by_kind(found: Sequence[Found]) -> list[dict[str, Any]]:
    """The findings of a moment by kind and pool, their counts summed (a snapshot may list a
    thousand of one kind: a moment says how many, the finding itself which)."""
    counts: dict[tuple[str, str], int] = {}
    for f in found:
        key = (f.kind.value, f.pool.value)
        counts[key] = counts.get(key, 0) + f.count
    return [{"kind": k, "pool": p, "count": n} for (k, p), n in counts.items()]


def finding_of(found: Found) -> dict[str, Any]:
    """The finding's ids, counts, hook and iteration, its requests hashed."""
    common = {
        "kind": found.kind.value,
        "pool": found.pool.value,
        "ids": list(found.slots[:MAX_IDS]),
        "page_size": found.page_size,
        "requests": sorted({request_name(r) for r in found.requests})[:MAX_REQUESTS],
    }
    if isinstance(found, Tripwire):
        return {
            "record": "tripwire",
            **common,
            "count": found.count,
            "hook": found.first_seen_hook,
            "seq": found.seq,
        }
    return {"record": "repair", **common, "count": found.count, "hook": found.hook, "seq": found.seq}


@dataclass(slots=True)
class IncidentRecord:
    """One incident: where it happened (``rank``: the operator's side, never in the bundle) and
    what the bundle says (``body``: JSON-ready, redacted)."""

    id: str
    rank: dict[str, str]  # key, source, boot_id: how later snapshots find it
    body: dict[str, Any]
    after: int = 0  # moments kept after the first sighting
    fitted: int = 0  # the byte share its body was last made to fit (0: changed since: fit again)

    @property
    def open(self) -> bool:
        """Still collecting moments after its first sighting."""
        return self.after < AFTER

    def seen(self, snap: Snapshot, found: Found) -> bool:
        """The finding in a later snapshot: its latest ids, counts and requests, a better call site;
        True when any of those changed (not merely when it was last seen: that is saved with the
        next change, or at shutdown)."""
        body = self.body
        before = (body["finding"], body["call_site"])
        body["finding"] = {
            **finding_of(found),
            "hook": body["finding"]["hook"],
            "seq": body["finding"]["seq"],
        }
        if isinstance(found, Repair):
            body["finding"]["last_action"] = {"hook": found.hook, "seq": found.seq}
        body["call_site"] = _better(body["call_site"], found)
        body["last_seen_at"] = snap.taken_at
        body["times_seen"] += 1
        body["guard"] = guard_of(snap, found)
        self.fitted = 0
        return (body["finding"], body["call_site"]) != before

    def later(self, snap: Snapshot) -> None:
        """A later moment of the rank (until :data:`AFTER` were kept)."""
        if self.open and snap.taken_at > self.body["moments"][-1]["taken_at"]:
            self.body["moments"].append(moment(snap))
            self.after += 1
            self.fitted = 0


def _better(kept: dict[str, Any] | None, found: Found) -> dict[str, Any] | None:
    """A call site taken inside a free wins over one taken at a hook; else the first one stays."""
    site = found.call_site
    if site is None:
        return kept
    if kept is None or (kept["kind"] == CallSiteKind.HOOK.value and site.kind is not CallSiteKind.HOOK):
        return dump_call_site(site)
    return kept


def guard_of(snap: Snapshot, found: Found) -> dict[str, Any]:
    """Whether guard was on, and what it did to the finding's pool (as the snapshot says)."""
    health = snap.probe
    on = bool(health and health.guard)
    done = [
        {
            "kind": r.kind.value,
            "count": r.count,
            "ids": list(r.slots[:MAX_ACTION_IDS]),
            "hook": r.hook,
            "seq": r.seq,
        }
        for r in snap.repairs
        if r.pool is found.pool
    ][:MAX_ACTIONS]
    return {"enabled": on, "return_enabled": bool(health and health.guard_return), "actions": done}


def engine_of(snap: Snapshot, ranks_seen: list[str]) -> dict[str, Any]:
    w = snap.worker
    return {
        "engine": w.engine,
        "release": w.release,
        "release_verified": w.release_verified,
        "model": model_name(w.model),
        "role": w.role.value,
        "rank": {"dp": w.dp_rank, "tp": w.tp_rank, "pp": w.pp_rank},
        "ranks_seen": ranks_seen[:MAX_RANKS_SEEN],
        "idle_check_strict": snap.idle_check_strict,
        "source": snap.source,
    }


def probe_of(snap: Snapshot) -> dict[str, Any] | None:
    h = snap.probe
    if h is None:
        return None
    return {
        "samples_total": h.samples_total,
        "errors_total": h.errors_total,
        "sample_cost_seconds": h.sample_cost_seconds,
        "census_cost_seconds": h.census_cost_seconds,
        "census_total": h.census_total,
        "disabled": h.disabled,
        "tripwires_dropped": h.tripwires_dropped,
    }


def new_record(
    ident: str,
    snap: Snapshot,
    found: Found,
    earlier: list[Snapshot],
    ranks_seen: list[str],
    poolwatch: dict[str, Any],
) -> IncidentRecord:
    """The record of a finding first seen in ``snap`` (``earlier``: the rank's snapshots of the
    same source and boot before it, oldest first)."""
    site = found.call_site
    body = {
        "schema": "poolwatch.incident",
        "version": 1,
        "id": ident,
        "finding": finding_of(found),
        "call_site": None if site is None else dump_call_site(site),
        "first_seen_at": snap.taken_at,
        "last_seen_at": snap.taken_at,
        "times_seen": 1,
        "guard": guard_of(snap, found),
        "engine": engine_of(snap, ranks_seen),
        "probe": probe_of(snap),
        "moments": [moment(s) for s in earlier[-BEFORE:]] + [moment(snap)],
        "first_moment": min(len(earlier), BEFORE),
        "poolwatch": poolwatch,
    }
    rank = {"key": snap.worker.key, "source": snap.source, "boot_id": snap.boot_id}
    return IncidentRecord(ident, rank, body)
