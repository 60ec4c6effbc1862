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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from poolwatch import fields
from poolwatch.detect.alert import Alert
from poolwatch.discovery.safety import UnsafePathError
from poolwatch.sidecar.state_codec import (
    Told,
    Undelivered,
    decode_alerts,
    decode_told,
    decode_undelivered,
    encode_alerts,
)
from poolwatch.sidecar.state_file import read_state_bytes, write_state_bytes
from poolwatch.sidecar.state_fit import (
    MAX_STATE_BYTES,
    dumps,
)

__all__ = ["LoadResult", "load_alerts", "load_state", "save_alerts"]

log = logging.getLogger("poolwatch.detect")


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
