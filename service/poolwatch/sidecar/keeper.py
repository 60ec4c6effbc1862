"""The alert state file kept in step with the sidecar: what a restart takes back, what is saved.

:class:`StateKeeper` restores, at start, the alerts that were firing and what each receiver was
told and is still owed (:mod:`poolwatch.sidecar.persist`; stale temporary files of a killed write
are removed first), hands that to the deliverers once they exist (a webhook is not told again
what it got; a receiver owed a ``resolved`` is owed it still), and saves whenever any of it
changes.  A file that is corrupt (set aside) or that someone else could have written (refused)
is counted on the supervisor; a file that cannot be written is logged once per change and
counted, and evaluation goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from poolwatch.detect.alert import Alert, AlertState
from poolwatch.notify.delivery import Deliverer
from poolwatch.sidecar.persist import load_state, save_alerts
from poolwatch.sidecar.state_codec import Told, Undelivered
from poolwatch.sidecar.state_file import remove_stale_temps
from poolwatch.sidecar.supervise import Supervisor

__all__ = ["StateKeeper"]

log = logging.getLogger("poolwatch.sidecar")


class StateKeeper:
    """One sidecar's alert state file (``path`` None: memory only)."""

    def __init__(self, path: Path | None, supervisor: Supervisor) -> None:
        self.path = path
        self._supervisor = supervisor
        self._deliverers: Sequence[Deliverer] = ()
        self._restored: list[Alert] = []  # firing before the restart
        self._told: Told = {}  # which receivers acknowledged each of them (not told again)
        self._owed: Undelivered = {}  # receiver -> resolved notices it was owed before the restart
        self._saved: tuple[object, ...] | None = None  # what the file holds (written on a change)
        self._error = ""

    def restore(self) -> list[Alert]:
        """The alerts the file says were firing (none without a file, or from a refused one)."""
        if self.path is None:
            return []
        stale = remove_stale_temps(self.path)
        if stale:
            log.info("event=state_file_temps_removed path=%s files=%s", self.path, ",".join(stale))
        loaded = load_state(self.path)
        if loaded.set_aside is not None:
            self._supervisor.error("state_file_corrupt")
        if loaded.unsafe:
            self._supervisor.error("state_file_unsafe")
        self._restored, self._told, self._owed = loaded.alerts, loaded.told or {}, loaded.undelivered
        self._saved = _key(self._restored, self._told, self._owed)
        return self._restored

    def hand_over(self, deliverers: Sequence[Deliverer], now: float) -> None:
        """Give each new deliverer what its receiver was told and is owed; from now on what is
        saved is read from them."""
        for deliverer in deliverers:
            name = deliverer.receiver.name
            deliverer.outbox.resume(self._owed.get(name, ()))  # a resolved it missed before the restart
            if not deliverer.outbox.resend:  # a webhook is told what it never got, and only that
                got = [a for a in self._restored if name in self._told.get(a.fingerprint, ())]
                deliverer.outbox.told(got, now)
        self._deliverers = deliverers

    def save(self, alerts: Sequence[Alert]) -> None:
        """Write the file when what it would say changed."""
        if self.path is None:
            return
        firing = [a for a in alerts if a.state is AlertState.FIRING]
        told, owed = self._told_now(firing), self._owed_now()
        key = _key(firing, told, owed)
        if key == self._saved:
            return
        try:
            save_alerts(self.path, firing, told, owed)
        except OSError as exc:  # a read-only volume, an unsafe directory: keep evaluating, say so once
            self._supervisor.error("state_file_write")
            error = f"{type(exc).__name__}: {exc}"
            if error != self._error:
                log.error("event=state_file_write_failed path=%s error=%s", self.path, error)
            self._error = error
            return
        if self._error:
            log.info("event=state_file_write_recovered path=%s", self.path)
        self._error, self._saved = "", key

    def _told_now(self, firing: list[Alert]) -> dict[str, frozenset[str]]:
        """Which plain webhooks acknowledged each firing alert (before the hand-over: the file's)."""
        if not self._deliverers:
            return {a.fingerprint: self._told[a.fingerprint] for a in firing if a.fingerprint in self._told}
        told: dict[str, set[str]] = {}
        for d in self._deliverers:
            if not d.outbox.resend:
                for fp in d.outbox.delivered_firing():
                    told.setdefault(fp, set()).add(d.receiver.name)
        return {a.fingerprint: frozenset(told[a.fingerprint]) for a in firing if a.fingerprint in told}

    def _owed_now(self) -> Undelivered:
        """The resolved notices each receiver is owed (before the hand-over: the file's)."""
        if not self._deliverers:
            return self._owed
        return {d.receiver.name: d.outbox.undelivered() for d in self._deliverers}


def _key(alerts: Sequence[Alert], told: Told, owed: Undelivered) -> tuple[object, ...]:
    firing = frozenset(a.fingerprint for a in alerts if a.state is AlertState.FIRING)
    owing = frozenset((name, a.fingerprint) for name, items in owed.items() for a in items)
    return (firing, frozenset(told.items()), owing)
