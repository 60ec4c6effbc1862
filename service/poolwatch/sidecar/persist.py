"""Firing alerts survive a sidecar restart: a small JSON state file, written atomically.

Why persist rather than rely on re-detection alone: a pool imbalance is re-detected from the next
snapshot, but an alert raised by a log line (a crash) or a tripwire seen once would be lost, and
Alertmanager would resolve it by itself once its ``endsAt`` passes.  On start the detector takes
the saved alerts back as firing (their original start time kept) and the notifiers re-send them;
an alert the fresh data no longer confirms resolves through the usual hysteresis, or after
``restore_grace`` if its rank never reports again.

Each alert also lists the receivers that acknowledged it (``told``): after a restart a plain
webhook is not told again what it got, and is told what it never got.  The notices a receiver is
still owed that the detector no longer holds -- a ``resolved`` that fell while the receiver was
down -- are kept per receiver (``undelivered``) and owed again after a restart, so a webhook that
comes back after the sidecar restarted still hears that its incident is over.

What is written can always be read back: the writer keeps every text, count and the whole file
within the reader's bounds (:mod:`poolwatch.sidecar.state_fit`), and says in the file (``cut``) and
in the log (``event=state_file_cut``) what it had to shorten or leave out.

The file is read and written only where no one else could have written it
(:mod:`poolwatch.sidecar.state_file`): a planted file is refused, logged
(``event=state_file_unsafe``) and left where it is; nothing is restored from it.

A corrupt state file (not JSON, wrong shape, NaN times, deep nesting, over 4 MiB) never stops the
sidecar: :func:`load_state` renames it aside (``<name>.corrupt-<unix time>``), logs it once, and
says so (``LoadResult.set_aside``, counted by the caller); the sidecar starts with no alerts.
The file is opened without blocking and read only if it is a regular file (a FIFO or device at
its path is logged and left alone, never waited on), and an alert this version does not know (a
rollback) is skipped with a warning while every other alert is restored.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from poolwatch import fields
from poolwatch.detect.alert import Alert, AlertState
from poolwatch.detect.rules import by_name
from poolwatch.detect.schema import Severity
from poolwatch.discovery.safety import UnsafePathError
from poolwatch.sidecar.state_file import read_state_bytes, write_state_bytes
from poolwatch.sidecar.state_fit import (
    MAX_ALERTS,
    MAX_ENTRIES,
    MAX_STATE_BYTES,
    MAX_TEXT,
    dumps,
    fit_document,
)

__all__ = [
    "STATE_VERSION",
    "LoadResult",
    "Told",
    "Undelivered",
    "decode_alerts",
    "decode_told",
    "encode_alerts",
    "load_alerts",
    "load_state",
    "save_alerts",
]

STATE_VERSION = 1
log = logging.getLogger("poolwatch.detect")


Told = Mapping[str, frozenset[str]]  # alert fingerprint -> the receivers that acknowledged it
Undelivered = Mapping[str, Sequence[Alert]]  # receiver -> resolved alerts it is still owed


def _encode_one(a: Alert) -> dict[str, Any]:
    doc = {
        "name": a.name,
        "subject": a.subject,
        "severity": a.severity.value,
        "labels": dict(a.labels),
        "annotations": dict(a.annotations),
        "value": a.value,
        "active_since": a.active_since,
        "fired_at": a.fired_at,
        "last_seen": a.last_seen,
    }
    return doc if a.resolved_at is None else {**doc, "resolved_at": a.resolved_at}


def encode_alerts(
    alerts: Sequence[Alert], told: Told | None = None, undelivered: Undelivered | None = None
) -> dict[str, Any]:
    """The JSON document of the firing ``alerts`` (others are not worth keeping) and the resolved
    notices each receiver is still owed, within what :func:`load_state` reads
    (:func:`~poolwatch.sidecar.state_fit.fit_document`: what was cut is said in its ``cut``)."""
    told = told or {}
    owed = {
        name: [_encode_one(a) for a in items if a.state is AlertState.RESOLVED]
        for name, items in (undelivered or {}).items()
    }
    firing = [
        {**_encode_one(a), "told": sorted(told.get(a.fingerprint, ()))}
        for a in alerts
        if a.state is AlertState.FIRING
    ]
    doc = fit_document(firing, {name: items for name, items in owed.items() if items})
    return {"version": STATE_VERSION, **doc}


def _strings(raw: object, where: str) -> dict[str, str]:
    d = fields.mapping(raw, where, MAX_ENTRIES)
    return {fields.text(k, where): fields.text(v, f"{where}.{k}", MAX_TEXT) for k, v in d.items()}


class UnknownAlertError(fields.FieldError):
    """A saved alert this version does not know (written by another version): skipped alone."""


def _decode_one(raw: Any, where: str) -> Alert:
    item = fields.mapping(raw, where, 32)
    name = fields.text(item.get("name"), f"{where}.name")
    try:
        by_name(name)
    except KeyError:
        raise UnknownAlertError(f"{where}.name: no alert named {fields.shown(name)}") from None
    fired = item.get("fired_at")
    return Alert(
        name=name,
        subject=fields.text(item.get("subject"), f"{where}.subject", MAX_TEXT),
        severity=fields.enumerated(Severity, item.get("severity"), f"{where}.severity"),
        state=AlertState.FIRING,
        labels=tuple(sorted(_strings(item.get("labels"), f"{where}.labels").items())),
        annotations=_strings(item.get("annotations"), f"{where}.annotations"),
        value=fields.number(item.get("value"), f"{where}.value"),
        active_since=fields.number(item.get("active_since"), f"{where}.active_since"),
        fired_at=None if fired is None else fields.number(fired, f"{where}.fired_at"),
        last_seen=fields.number(item.get("last_seen"), f"{where}.last_seen"),
    )


def decode_told(doc: Any) -> dict[str, frozenset[str]]:
    """The receivers each alert of a (valid) state document was delivered to; none when unsaid."""
    out = {}
    _check_version(doc)
    for i, raw in enumerate(doc.get("alerts", [])[:MAX_ALERTS]):
        try:
            alert = _decode_one(raw, f"alerts[{i}]")
        except UnknownAlertError:  # skipped (decode_alerts warned once)
            continue
        names = raw.get("told", [])
        if not isinstance(names, list) or len(names) > MAX_ENTRIES:
            raise ValueError(f"alert {alert.name}: 'told' must be a list of receiver names")
        if names:
            out[alert.fingerprint] = frozenset(fields.text(n, f"{alert.name}.told") for n in names)
    return out


def decode_undelivered(doc: Any) -> dict[str, list[Alert]]:
    """The resolved notices each receiver is still owed (a state document without them: none)."""
    _check_version(doc)
    owed = fields.mapping(doc.get("undelivered", {}), "undelivered", MAX_ENTRIES)
    out = {}
    for receiver, raw in owed.items():
        where = f"undelivered[{fields.shown(receiver)}]"
        items = fields.items(raw, where, _resolved, MAX_ALERTS)
        out[fields.text(receiver, where)] = [a for a in items if a is not None]
    return out


def _resolved(raw: Any, where: str) -> Alert | None:
    """One owed resolved notice; ``None`` (and a warning) for an alert this version does not know."""
    alert = _known(raw, where)
    if alert is None:
        return None
    ended = fields.number(fields.mapping(raw, where, 32).get("resolved_at"), f"{where}.resolved_at")
    return replace(alert, state=AlertState.RESOLVED, resolved_at=ended)


def decode_alerts(doc: Any) -> list[Alert]:
    """Alerts from a state document; raises ``ValueError`` naming what is wrong."""
    _check_version(doc)
    decoded = fields.items(doc.get("alerts", []), "alerts", _known, MAX_ALERTS)
    return [alert for alert in decoded if alert is not None]


def _check_version(doc: Any) -> None:
    if not isinstance(doc, dict) or doc.get("version") != STATE_VERSION:
        raise ValueError(f"not a poolwatch alert state of version {STATE_VERSION}")


def _known(raw: Any, where: str) -> Alert | None:
    """One saved alert; ``None`` (and a warning) for one this version does not know."""
    try:
        return _decode_one(raw, where)
    except UnknownAlertError as exc:
        log.warning("event=state_alert_unknown error=%s", exc)
        return None


def save_alerts(
    path: Path, alerts: Sequence[Alert], told: Told | None = None, undelivered: Undelivered | None = None
) -> None:
    """Write atomically (:func:`~poolwatch.sidecar.state_file.write_state_bytes`); an unsafe
    directory raises :class:`~poolwatch.discovery.safety.UnsafePathError` (an ``OSError``)."""
    doc = encode_alerts(alerts, told, undelivered)
    if "cut" in doc:
        log.warning("event=state_file_cut path=%s %s", path, _said(doc["cut"]))
    write_state_bytes(path, dumps(doc))


def _said(cut: Any) -> str:
    """A ``cut`` note as ``key=value`` fields (a hand-edited note: whatever it says, shown short)."""
    if not isinstance(cut, dict):
        return f"cut={fields.shown(cut)}"
    return " ".join(f"cut_{str(k)[:20]!s}={fields.shown(v, 20)}" for k, v in list(cut.items())[:8])


@dataclass(frozen=True)
class LoadResult:
    alerts: list[Alert]
    set_aside: Path | None = None  # where a corrupt file went (None: nothing was wrong)
    error: str = ""
    told: Told | None = None  # alert fingerprint -> receivers that acknowledged it
    undelivered: Undelivered = field(default_factory=dict)  # receiver -> resolved notices it is owed
    unsafe: bool = False  # refused: someone else could have written it (left where it is)


def load_state(path: Path, now: float | None = None) -> LoadResult:
    """The saved alerts; a corrupt file is renamed aside and logged, and none are restored; a file
    someone else could have written is refused, logged and left alone."""
    try:
        data = read_state_bytes(path, MAX_STATE_BYTES)
    except FileNotFoundError:
        return LoadResult([])
    except UnsafePathError as exc:  # planted, or in a directory anyone may rewrite: never restored
        log.error("event=state_file_unsafe path=%s error=%s", path, exc)
        return LoadResult([], None, f"unsafe: {exc}", unsafe=True)
    except OSError as exc:  # unreadable (permissions), a FIFO: leave it where it is
        log.warning("event=state_file_unreadable path=%s error=%s", path, exc)
        return LoadResult([], None, f"{type(exc).__name__}: {exc}")
    try:
        if len(data) > MAX_STATE_BYTES:
            raise ValueError(f"larger than {MAX_STATE_BYTES} bytes")
        doc = json.loads(data.decode("utf-8"))
        result = LoadResult(decode_alerts(doc), told=decode_told(doc), undelivered=decode_undelivered(doc))
        if doc.get("cut"):  # the writer had to leave something out: said once more at the start
            log.warning("event=state_file_cut path=%s %s", path, _said(doc["cut"]))
        return result
    except (ValueError, RecursionError) as exc:
        error = f"{type(exc).__name__}: {str(exc)[:200]}"
    aside = path.with_name(f"{path.name}.corrupt-{int(time.time() if now is None else now)}")
    try:
        os.replace(path, aside)
    except OSError as exc:
        log.error("event=state_file_corrupt path=%s error=%s set_aside_failed=%s", path, error, exc)
        return LoadResult([], None, error)
    log.error("event=state_file_corrupt path=%s set_aside=%s error=%s", path, aside, error)
    return LoadResult([], aside, error)


def load_alerts(path: Path) -> list[Alert]:
    """The saved alerts; none when the file is missing, unreadable or corrupt (set aside, logged)."""
    return load_state(path).alerts
