"""Firing alerts survive a sidecar restart: a small JSON state file, written atomically.

Why persist rather than rely on re-detection alone: a pool imbalance is re-detected from the next
snapshot, but an alert raised by a log line (a crash) or a tripwire seen once would be lost, and
Alertmanager would resolve it by itself once its ``endsAt`` passes.  On start the detector takes
the saved alerts back as firing (their original start time kept) and the notifiers re-send them;
an alert the fresh data no longer confirms resolves through the usual hysteresis, or after
``restore_grace`` if its rank never reports again.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from poolwatch.detect.alert import Alert, AlertState
from poolwatch.detect.rules import Severity, by_name

__all__ = ["STATE_VERSION", "decode_alerts", "encode_alerts", "load_alerts", "save_alerts"]

STATE_VERSION = 1
log = logging.getLogger("poolwatch.detect")


def encode_alerts(alerts: Sequence[Alert]) -> dict[str, Any]:
    """The JSON document of the firing ``alerts`` (others are not worth keeping)."""
    return {
        "version": STATE_VERSION,
        "alerts": [
            {
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
            for a in alerts
            if a.state is AlertState.FIRING
        ],
    }


def _decode_one(item: Any) -> Alert:
    by_name(item["name"])  # an alert this version no longer knows is an error
    labels = item["labels"]
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        raise ValueError("labels must map names to strings")
    return Alert(
        name=str(item["name"]),
        subject=str(item["subject"]),
        severity=Severity(item["severity"]),
        state=AlertState.FIRING,
        labels=tuple(sorted(labels.items())),
        annotations={str(k): str(v) for k, v in dict(item["annotations"]).items()},
        value=float(item["value"]),
        active_since=float(item["active_since"]),
        fired_at=None if item["fired_at"] is None else float(item["fired_at"]),
        last_seen=float(item["last_seen"]),
    )


def decode_alerts(doc: Any) -> list[Alert]:
    """Alerts from a state document; raises ``ValueError`` naming what is wrong."""
    if not isinstance(doc, dict) or doc.get("version") != STATE_VERSION:
        raise ValueError(f"not a poolwatch alert state of version {STATE_VERSION}")
    out = []
    for i, item in enumerate(doc.get("alerts", [])):
        try:
            out.append(_decode_one(item))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"alerts[{i}]: {type(exc).__name__}: {exc}") from None
    return out


def save_alerts(path: Path, alerts: Sequence[Alert]) -> None:
    """Write atomically: a temporary file in the same directory, then a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(encode_alerts(alerts), out, indent=1, sort_keys=True)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_alerts(path: Path) -> list[Alert]:
    """The saved alerts; none when the file is missing, unreadable or corrupt (logged)."""
    try:
        return decode_alerts(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        log.warning("ignoring alert state file path=%s error=%s", path, exc)
        return []
