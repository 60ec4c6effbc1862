"""The incidents a sidecar has seen, on disk beside its alert state file, so a restart loses none.

The file is ``<state file's name without suffix>.incidents.json`` in the alert state file's directory
(``/tmp/poolwatch/alerts.incidents.json`` in the manifests); without ``POOLWATCH_STATE_FILE`` the
incidents live in memory only.  It is read and written exactly as the alert state file is
(:mod:`poolwatch.sidecar.state_file`: only where no one else could have written it, atomically,
mode 0600, at most :data:`MAX_BYTES`).  A file that is not a valid incidents document is set aside
(``<name>.corrupt-<unix time>``) and logged; a record that does not decode is skipped alone.

It is never written past :data:`MAX_BYTES` (:func:`fit_records`: each record within its share,
what was shed said in the record's ``cut``; :mod:`~poolwatch.sidecar.incidents.fit`), so what is
written is always read back whole.  A file past it can only come from an older version or another
writer: it is set aside (kept, not deleted) and logged, and the sidecar starts without incidents.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from poolwatch.discovery.safety import UnsafePathError
from poolwatch.sidecar.incidents.fit import fit_body, record_budget
from poolwatch.sidecar.incidents.record import IncidentRecord
from poolwatch.sidecar.state_file import read_state_bytes, remove_stale_temps, write_state_bytes

__all__ = [
    "FILE_VERSION",
    "MAX_BYTES",
    "MAX_RECORDS",
    "fit_records",
    "incidents_path",
    "load_incidents",
    "read_incidents",
    "save_incidents",
]

FILE_VERSION = 1
MAX_BYTES = 8 << 20
MAX_RECORDS = 100  # the records a sidecar keeps (IncidentLog's limit): each has this share of the file
log = logging.getLogger("poolwatch.sidecar")


def incidents_path(state_file: str) -> Path | None:
    """Where the incidents are kept: beside the alert state file (None: memory only)."""
    if not state_file:
        return None
    path = Path(state_file)
    return path.with_name(f"{path.stem}.incidents.json")


def fit_records(records: list[IncidentRecord], max_bytes: int = MAX_BYTES) -> list[IncidentRecord]:
    """The records, each made to fit its share of ``max_bytes`` (in place; what was shed is in its
    ``cut``); one that cannot is left out and logged."""
    budget = record_budget(max_bytes, max(len(records), MAX_RECORDS))  # steady: each fitted once per change
    kept = []
    for record in records:
        if record.fitted == budget:  # unchanged since it was made to fit this share
            kept.append(record)
        elif fit_body(record.body, budget):
            record.fitted = budget
            kept.append(record)
        else:
            log.error("event=incident_left_out id=%s error=larger than its %d bytes", record.id, budget)
    return kept


def save_incidents(path: Path, records: list[IncidentRecord]) -> None:
    """Write every record atomically, within :data:`MAX_BYTES` (:func:`fit_records`); raises
    ``OSError`` (an unsafe directory included)."""
    records = fit_records(records)
    doc = {
        "version": FILE_VERSION,
        "incidents": [{"id": r.id, "rank": r.rank, "after": r.after, "body": r.body} for r in records],
    }
    write_state_bytes(path, json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8"))


def read_incidents(path: Path) -> list[IncidentRecord]:
    """The records of an incidents file; ``OSError`` when it cannot be read (or is unsafe),
    ``ValueError`` when it is not an incidents document.  Changes nothing on disk."""
    data = read_state_bytes(path, MAX_BYTES)
    try:
        if len(data) > MAX_BYTES:
            raise ValueError(f"larger than {MAX_BYTES} bytes")
        doc = json.loads(data.decode("utf-8"))
    except RecursionError as exc:
        raise ValueError(f"{path}: nested too deep") from exc
    if not isinstance(doc, dict) or doc.get("version") != FILE_VERSION:
        raise ValueError(f"{path}: not a poolwatch incidents file of version {FILE_VERSION}")
    items = doc.get("incidents")
    if not isinstance(items, list):
        raise ValueError(f"{path}: incidents: expected a list")
    return [r for r in (_record(item) for item in items) if r is not None]


def load_incidents(path: Path, now: float | None = None) -> list[IncidentRecord]:
    """The saved records at the sidecar's start (stale temporary files removed first); none when
    there is no file, or it is unsafe or unreadable (logged, left alone), or corrupt (set aside)."""
    remove_stale_temps(path)
    try:
        return read_incidents(path)
    except FileNotFoundError:
        return []
    except UnsafePathError as exc:
        log.error("event=incident_file_unsafe path=%s error=%s", path, exc)
        return []
    except OSError as exc:
        log.warning("event=incident_file_unreadable path=%s error=%s", path, exc)
        return []
    except ValueError as exc:
        _set_aside(path, str(exc)[:300], now)
        return []


def _record(item: Any) -> IncidentRecord | None:
    try:
        ident, rank, body, after = item["id"], item["rank"], item["body"], item["after"]
        if not (isinstance(ident, str) and isinstance(body, dict) and isinstance(after, int)):
            raise TypeError("id, body, after")
        if not (
            isinstance(rank, dict) and all(isinstance(rank.get(k), str) for k in ("key", "source", "boot_id"))
        ):
            raise TypeError("rank")
        if not isinstance(body.get("moments"), list) or not body["moments"] or body.get("id") != ident:
            raise TypeError("body")
    except (KeyError, TypeError) as exc:
        log.warning("event=incident_record_skipped error=%s", exc)
        return None
    return IncidentRecord(ident, rank, body, after)


def _set_aside(path: Path, error: str, now: float | None) -> None:
    aside = path.with_name(f"{path.name}.corrupt-{int(time.time() if now is None else now)}")
    try:
        os.replace(path, aside)
    except OSError as exc:
        log.error("event=incident_file_corrupt path=%s error=%s set_aside_failed=%s", path, error, exc)
        return
    log.error("event=incident_file_corrupt path=%s set_aside=%s error=%s", path, aside, error)
