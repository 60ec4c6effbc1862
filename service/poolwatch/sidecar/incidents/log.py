"""Every incident the sidecar has seen, kept bounded, saved across restarts, ready to export.

:meth:`IncidentLog.observe` is a store listener (:meth:`~poolwatch.sidecar.store.SnapshotStore.subscribe`):
each tripwire and repair of a snapshot is an incident (:mod:`~poolwatch.sidecar.incidents.record`);
a new one is recorded with the rank's earlier moments from the store's history and saved at once;
a known one takes its latest ids, counts and call site; every later snapshot of the same rank,
source and boot adds a moment until :data:`~poolwatch.sidecar.incidents.record.AFTER` were kept.
A change of what the bundle says (ids, counts, a better call site, a moment kept) is saved at most
every :data:`SAVE_EVERY_S` seconds; when a finding was last seen only with the next change or at
shutdown (:meth:`flush`): a sidecar killed outright loses at most that.

At most :data:`MAX_INCIDENTS` are kept (the one seen longest ago goes first).  The common snapshot
-- no finding, no incident still collecting moments on its rank -- costs two truth tests.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from poolwatch.model.findings import Repair, Tripwire
from poolwatch.model.snapshot import Snapshot
from poolwatch.sidecar.incidents.file import MAX_RECORDS, fit_records, load_incidents, save_incidents
from poolwatch.sidecar.incidents.record import IncidentRecord, incident_id, new_record
from poolwatch.sidecar.store import SnapshotStore

__all__ = ["MAX_INCIDENTS", "SAVE_EVERY_S", "IncidentLog", "incident_summary"]

MAX_INCIDENTS = MAX_RECORDS
SAVE_EVERY_S = 5.0
log = logging.getLogger("poolwatch.sidecar")


class IncidentLog:
    """The incidents of one sidecar (``path`` None: memory only)."""

    def __init__(
        self,
        store: SnapshotStore,
        poolwatch: dict[str, Any],
        path: Path | None = None,
        clock: Callable[[], float] = time.time,
        limit: int = MAX_INCIDENTS,
    ) -> None:
        self._store, self._poolwatch, self.path = store, poolwatch, path
        self._clock, self._limit = clock, limit
        self._records: dict[str, IncidentRecord] = {}
        self._open: dict[tuple[str, str, str], list[IncidentRecord]] = {}  # (key, source, boot) -> collecting
        self._lock = threading.Lock()
        self._dirty = False
        self._saved_at = -float("inf")
        self._error = ""

    def restore(self) -> int:
        """Take back the saved incidents; returns how many."""
        if self.path is None:
            return 0
        with self._lock:
            for record in load_incidents(self.path):
                self._keep(record)
            return len(self._records)

    def observe(self, snap: Snapshot) -> None:
        """A new snapshot in the store (the scrape loop calls it)."""
        if not snap.tripwires and not snap.repairs and not self._open:
            return
        with self._lock:
            rank = (snap.worker.key, snap.source, snap.boot_id)
            collecting = self._open.get(rank, [])
            for record in collecting:
                record.later(snap)
                self._dirty = True
            self._open[rank] = [r for r in collecting if r.open and r.id in self._records]
            if not self._open[rank]:
                del self._open[rank]
            created = self._findings(snap, rank)
        self._save(now=self._clock(), at_once=created)

    def _findings(self, snap: Snapshot, rank: tuple[str, str, str]) -> bool:
        created = False
        every: list[Tripwire | Repair] = [*snap.tripwires, *snap.repairs]
        for found in every:
            ident = incident_id(rank[0], rank[1], rank[2], found)
            record = self._records.get(ident)
            if record is not None:
                self._dirty |= record.seen(snap, found)
                continue
            earlier = [
                s for s in self._store.history(rank[0]) if _same(s, snap) and s.taken_at < snap.taken_at
            ]
            record = new_record(ident, snap, found, earlier, self._ranks_of(snap), self._poolwatch)
            self._keep(record)
            created = True
            log.warning(
                "event=incident id=%s rank=%s kind=%s pool=%s",
                ident,
                rank[0],
                found.kind.value,
                found.pool.value,
            )
        return created

    def _keep(self, record: IncidentRecord) -> None:
        self._records[record.id] = record
        if record.open:
            key = (record.rank["key"], record.rank["source"], record.rank["boot_id"])
            self._open.setdefault(key, []).append(record)
        while len(self._records) > self._limit:
            oldest = min(self._records.values(), key=lambda r: r.body["last_seen_at"])
            del self._records[oldest.id]
        self._dirty = True

    def _ranks_of(self, snap: Snapshot) -> list[str]:
        """The ranks of the same worker this sidecar holds, as ``dp0-tp1-pp0``."""
        name = snap.worker.worker
        return sorted(
            s.worker.key.rsplit("/", 1)[-1] for s in self._store.latest() if s.worker.worker == name
        )

    def listed(self) -> list[dict[str, Any]]:
        """One line per incident, newest first: its id, rank, what and when (the operator's list)."""
        with self._lock:
            records = sorted(self._records.values(), key=lambda r: r.body["first_seen_at"], reverse=True)
            return [incident_summary(r) for r in records]

    def bundle(self, ident: str) -> dict[str, Any] | None:
        """The bundle's JSON document of incident ``ident`` (None: no such incident)."""
        with self._lock:
            record = self._records.get(ident)
            return None if record is None else _copy(record.body)

    def flush(self) -> None:
        """Save what changed now (shutdown)."""
        self._save(now=self._clock(), at_once=True)

    def _save(self, *, now: float, at_once: bool) -> None:
        if self.path is None or not self._dirty or (not at_once and now - self._saved_at < SAVE_EVERY_S):
            return
        with self._lock:  # fitted here, so the API shows what the file holds
            records = fit_records(list(self._records.values()))
            self._dirty, self._saved_at = False, now
        try:
            save_incidents(self.path, records)
        except OSError as exc:
            error = f"{type(exc).__name__}: {exc}"
            if error != self._error:
                log.error("event=incident_file_write_failed path=%s error=%s", self.path, error)
            self._error, self._dirty = error, True
            return
        self._error = ""


def _same(a: Snapshot, b: Snapshot) -> bool:
    return a.source == b.source and a.boot_id == b.boot_id


def incident_summary(record: IncidentRecord) -> dict[str, Any]:
    """One incident's line in ``GET /api/v1/incidents``: its id, rank, what and when."""
    body = record.body
    finding, engine = body["finding"], body["engine"]
    site = body["call_site"]
    return {
        "id": record.id,
        "rank": record.rank["key"],
        "source": record.rank["source"],
        "record": finding["record"],
        "kind": finding["kind"],
        "pool": finding["pool"],
        "count": finding["count"],
        "hook": finding["hook"],
        "engine": engine["engine"],
        "release": engine["release"],
        "first_seen_at": body["first_seen_at"],
        "last_seen_at": body["last_seen_at"],
        "call_site": site,
    }


def _copy(doc: dict[str, Any]) -> dict[str, Any]:
    copied: dict[str, Any] = copy.deepcopy(doc)
    return copied
