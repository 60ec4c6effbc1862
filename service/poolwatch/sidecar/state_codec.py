"""The state file's document: firing alerts, the receivers that acknowledged each (``told``) and
the resolved notices each receiver is still owed (``undelivered``), to and from JSON.  Pure: the
file itself, its bounds and its safety are :mod:`poolwatch.sidecar.persist`'s."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from poolwatch import fields
from poolwatch.detect.alert import Alert, AlertState
from poolwatch.detect.rules import by_name
from poolwatch.detect.schema import Severity
from poolwatch.sidecar.state_fit import MAX_ALERTS, MAX_ENTRIES, MAX_TEXT, fit_document

__all__ = [
    "STATE_VERSION",
    "Told",
    "UnknownAlertError",
    "Undelivered",
    "decode_alerts",
    "decode_told",
    "decode_undelivered",
    "encode_alerts",
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
