"""What one receiver has been told and what is due to it now: the :class:`Outbox` (pure, no I/O;
the :class:`~poolwatch.notify.delivery.Deliverer` runs it against the receiver).

The outbox remembers what the receiver has been told: a new firing or resolved
alert is due at once, a firing one is re-sent every ``resend_interval`` (so a receiver that lost
its state, or came back after an outage, learns it again), an alert that vanishes after being sent
firing is sent resolved.  A failed attempt keeps everything due, marks every firing alert to be
told again (the receiver may have restarted and forgotten it) and backs off exponentially.
Re-sending is only for a receiver that deduplicates (Alertmanager, ``resends``): a plain webhook
(``resend=False``) gets each state of an alert once, plus an update whenever a firing alert's
cause changes (:func:`~poolwatch.notify.cause.cause`: it gained its slot ids, its hook, an exact
basis); every receiver gets such an update at its next tick.  An alert counts as delivered only
after a 2xx.  :meth:`Outbox.told` marks alerts restored after a sidecar restart as delivered to
the receivers the state file says got them (:meth:`Outbox.delivered_firing` is what is saved).  The
queue is bounded: when more than ``capacity`` resolutions wait (a long outage), the oldest are
dropped and counted; firing alerts are never dropped (the detector bounds their number).

*One incident, one POST* (``gather``, ``peers``): alerts that start firing within ``gather``
seconds of the first of them go out together: as soon as every incident among them has all its
copies (``peers``: a worker's TP ranks, as the sidecar's store knows them), else ``gather`` after
the first started firing.  The TP ranks of a worker see one fault within milliseconds of each
other, each through its own probe; posted one by one, the first would open its Alertmanager group
alone and, with the shipped ``group_wait: 0s``, page alone, its peers following a
``group_interval`` later as a second notification (docs/alerting.md).  Only alerts never told to
the receiver wait; re-sends, updates and resolutions go out at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from poolwatch.detect.alert import Alert, AlertState
from poolwatch.notify.cause import cause

__all__ = ["INCIDENT_GATHER_S", "Outbox"]

# at most how long the sidecar holds a newly firing alert for the rest of its incident (a worker's
# TP ranks see one fault within milliseconds, each through its own probe's long-poll); it posts as
# soon as every copy is in
INCIDENT_GATHER_S = 0.2


@dataclass(slots=True)
class _Entry:
    alert: Alert
    sent_at: float | None = None  # last successful delivery of the current state
    dirty: bool = True  # the current state has not been delivered yet
    cause: str = ""  # what the receiver was (or is about to be) told the cause is


@dataclass(slots=True)
class Outbox:
    resend_interval: float
    capacity: int
    backoff_min: float = 1.0
    backoff_max: float = 60.0
    resend: bool = True
    gather: float = 0.0  # at most this long newly firing alerts wait for the rest of their incident
    since: float = 0.0  # when the outbox was made: alerts that fired before it never wait
    peers: Callable[[Alert], int] | None = None  # how many copies an alert's incident has (TP peers)
    dropped: int = 0
    _entries: dict[str, _Entry] = field(default_factory=dict)
    _retry_at: float = 0.0
    _backoff: float = 0.0

    def update(self, alerts: Sequence[Alert], now: float) -> None:
        """Take the detector's current list (pending alerts are nobody's business yet)."""
        current = {a.fingerprint: a for a in alerts if a.state is not AlertState.PENDING}
        for fp, alert in current.items():
            entry = self._entries.get(fp)
            if entry is None:
                if alert.state is AlertState.FIRING:
                    self._entries[fp] = _Entry(alert, cause=cause(alert))
            elif entry.alert.state is not alert.state:
                self._entries[fp] = _Entry(alert, cause=cause(alert))
            else:
                entry.alert = alert  # fresher figures go out with the next re-send
                self._updated(entry)
        for fp, entry in list(self._entries.items()):
            if fp not in current:
                self._vanished(fp, entry, now)
        self._bound()

    @staticmethod
    def _updated(entry: _Entry) -> None:
        """A firing alert whose cause changed is told again at once (every receiver)."""
        if entry.alert.state is AlertState.FIRING:
            now_cause = cause(entry.alert)
            if now_cause != entry.cause:
                entry.cause, entry.dirty = now_cause, True

    def _vanished(self, fp: str, entry: _Entry, now: float) -> None:
        if entry.alert.state is AlertState.RESOLVED:
            if not entry.dirty:
                del self._entries[fp]
        elif entry.sent_at is None:
            del self._entries[fp]  # never told: nothing to take back
        else:
            ended = replace(entry.alert, state=AlertState.RESOLVED, resolved_at=now)
            self._entries[fp] = _Entry(ended)

    def _bound(self) -> None:
        waiting = sorted(
            (e for e in self._entries.values() if e.dirty and e.alert.state is AlertState.RESOLVED),
            key=lambda e: e.alert.resolved_at or 0.0,
        )
        for entry in waiting[: max(0, self.queued - self.capacity)]:
            del self._entries[entry.alert.fingerprint]
            self.dropped += 1

    def _fresh(self) -> list[_Entry]:
        """The firing alerts the receiver was never told."""
        return [
            e
            for e in self._entries.values()
            if e.dirty and e.sent_at is None and e.alert.state is AlertState.FIRING
        ]

    def ready_at(self) -> float:
        """When the newly firing alerts go out together: now (0.0) when none waits or every
        incident has all its ``peers``, else ``gather`` after the first of them started firing.
        Only alerts that started firing after the outbox was made wait: one restored after a
        restart comes with its incident's other alerts."""
        fresh = [e.alert for e in self._fresh() if _fired_at(e.alert) > self.since]
        if not fresh or self.gather <= 0 or self._complete(fresh):
            return 0.0
        return min(_fired_at(a) for a in fresh) + self.gather

    def _complete(self, fresh: Sequence[Alert]) -> bool:
        """Every incident among ``fresh`` has all its copies (``peers``): they go at once.  An
        incident is one alert name, severity and identity but the TP rank."""
        if self.peers is None:
            return False
        incidents: dict[tuple[tuple[str, str], ...], list[Alert]] = {}
        for a in fresh:
            key = tuple(sorted((k, v) for k, v in a.all_labels.items() if k != "tp_rank"))
            incidents.setdefault(key, []).append(a)
        return all(len(copies) >= self.peers(copies[0]) for copies in incidents.values())

    def due(self, now: float) -> list[Alert]:
        if now < self._retry_at:
            return []
        held = {id(e) for e in self._fresh()} if now < self.ready_at() else set()
        return [
            e.alert
            for _, e in sorted(self._entries.items())
            if id(e) not in held
            and (
                e.dirty
                or (
                    self.resend
                    and e.alert.state is AlertState.FIRING
                    and now - (e.sent_at or 0.0) >= self.resend_interval
                )
            )
        ]

    def told(self, alerts: Sequence[Alert], now: float) -> None:
        """Count ``alerts`` (firing, restored from the state file) as delivered already."""
        for alert in alerts:
            if alert.state is AlertState.FIRING:
                self._entries[alert.fingerprint] = _Entry(alert, sent_at=now, dirty=False, cause=cause(alert))

    def undelivered(self) -> list[Alert]:
        """The resolved notices the receiver has not acknowledged yet (the sidecar keeps them in its
        state file, so a restart owes them still: :meth:`resume`)."""
        owed = sorted(self._entries.items())
        return [e.alert for _, e in owed if e.dirty and e.alert.state is AlertState.RESOLVED]

    def resume(self, owed: Sequence[Alert]) -> None:
        """Owe the receiver these resolved notices again (saved before a restart), unless it is
        already owed something newer of the same alert."""
        for alert in owed:
            if alert.state is AlertState.RESOLVED and alert.fingerprint not in self._entries:
                self._entries[alert.fingerprint] = _Entry(alert)
        self._bound()

    def delivered_firing(self) -> frozenset[str]:
        """The fingerprints of the firing alerts this receiver acknowledged (2xx), as they stand."""
        return frozenset(
            fp
            for fp, e in self._entries.items()
            if e.alert.state is AlertState.FIRING and e.sent_at is not None and not e.dirty
        )

    def delivered(self, alerts: Sequence[Alert], now: float) -> None:
        self._backoff, self._retry_at = 0.0, 0.0
        for alert in alerts:
            entry = self._entries.get(alert.fingerprint)
            if entry is not None and entry.alert.state is alert.state:
                entry.sent_at = now
                # a cause that changed while this batch was on its way is still to be told
                entry.dirty = alert.state is AlertState.FIRING and cause(alert) != entry.cause

    def failed(self, now: float) -> float:
        """Back off; returns the delay before the next attempt.  The receiver may have lost its
        state (a restart behind the outage), so every firing alert is told again on recovery
        (unless the receiver does not deduplicate: it would show the alert twice)."""
        for entry in self._entries.values():
            if self.resend and entry.alert.state is AlertState.FIRING:
                entry.dirty = True
        self._backoff = min(self.backoff_max, max(self.backoff_min, self._backoff * 2))
        self._retry_at = now + self._backoff
        return self._backoff

    @property
    def retry_at(self) -> float:
        """When the next attempt is allowed (0 unless backing off)."""
        return self._retry_at

    @property
    def queued(self) -> int:
        return sum(1 for e in self._entries.values() if e.dirty)


def _fired_at(alert: Alert) -> float:
    return alert.fired_at if alert.fired_at is not None else alert.active_since
