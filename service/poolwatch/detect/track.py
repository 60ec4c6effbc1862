"""One alert instance's record in the tracker (:mod:`poolwatch.detect.tracker`).  Pure.

A :class:`Track` holds since when the instance is pending, when it fired and was last seen, how many
bad and clean samples it has had; :meth:`Track.due` says whether a firing instance may resolve
(each :class:`~poolwatch.detect.schema.Mode` its own way), and :meth:`Track.alert` builds the
:class:`~poolwatch.detect.alert.Alert` it shows -- the previous one when nothing changed, and the
annotations but the description (fixed per alert instance) built once.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass

from poolwatch import fields
from poolwatch.detect.alert import Alert, AlertState, Signal
from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.schema import Mode

__all__ = ["MAX_DESCRIPTION", "Annotate", "Track"]

# An alert's description is at most this long (a recurring double free names every tripwire: twelve
# made 6,656 characters); past it the text says how much was cut, and the rank's incidents
# (/api/v1/incidents) keep every finding whole.  The state file reads texts up to this length.
MAX_DESCRIPTION = fields.MAX_TEXT
Annotate = Callable[[Signal], Mapping[str, str]]  # all but the description: fixed per (alert, labels)


@dataclass(slots=True)
class Track:
    signal: Signal
    mode: Mode
    state: AlertState
    since: float
    last_seen: float
    last_sample: Hashable = None
    samples: int = 1
    clean: int = 0
    fired_at: float | None = None
    resolved_at: float | None = None
    restored_at: float | None = None  # loaded from the state file and not observed since
    restarted: bool = False  # its rank restarted, and the new boot has not shown it
    reason: str = ""  # why it resolved, when not because its condition cleared
    static: Mapping[str, str] | None = None  # annotations but the description (fixed per instance)
    shown: tuple[Signal, tuple[object, ...], Alert] | None = None  # the last Alert built, and from what

    def due(self, config: DetectorConfig, now: float) -> bool:
        """Whether this firing instance has been quiet (and clean) long enough to resolve."""
        quiet = now - self.last_seen
        if self.mode is Mode.EVENT:
            return quiet >= config.incident_hold
        if self.mode is Mode.TIMED:
            return self.clean > 0 and quiet >= config.resolve_hold
        clean = self.restarted or self.clean >= config.resolve_samples
        return clean and quiet >= config.resolve_hold

    def resolve(self, now: float) -> None:
        self.state, self.resolved_at, self.restored_at = AlertState.RESOLVED, now, None

    def alert(self, annotate: Annotate) -> Alert:
        """The :class:`Alert` this instance shows now (the previous one when nothing changed)."""
        s = self.signal
        shown = (self.state, self.since, self.fired_at, self.resolved_at, self.last_seen, self.reason)
        if self.shown is not None and self.shown[0] is s and self.shown[1] == shown:
            return self.shown[2]
        if self.static is None:
            self.static = {k: v for k, v in annotate(s).items() if k != "description"}
        annotations = {**self.static, "description": fields.cut(s.description, MAX_DESCRIPTION)}
        if self.reason:
            annotations["resolved_reason"] = self.reason
        alert = Alert(
            name=s.alert,
            subject=s.subject,
            severity=s.severity,
            state=self.state,
            labels=s.labels,
            annotations=annotations,
            value=s.value,
            active_since=self.since,
            fired_at=self.fired_at,
            resolved_at=self.resolved_at,
            last_seen=self.last_seen,
        )
        self.shown = (s, shown, alert)
        return alert
