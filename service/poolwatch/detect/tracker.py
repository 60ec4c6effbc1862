"""The alert state machine: pending -> firing -> resolved, with hysteresis.  Pure; time is passed in.

Three ways to judge an alert (:class:`~poolwatch.detect.schema.Mode`):

* **sampled**, on every snapshot of a rank (each source judges its own): a condition seen in
  ``min_samples`` samples at distinct iterations (and for ``for_seconds``) fires; a pending
  condition that misses one sample is dropped (so a gap that oscillates never fires); a firing one
  resolves only after ``resolve_samples`` clean samples *and* ``resolve_hold`` seconds since it was
  last seen.  A snapshot that cannot tell (coarse figures while busy) is no sample at all;
* **event**, a log line: fires at once and resolves ``incident_hold`` seconds after the last one;
* **timed**, on the evaluation timer (staleness, target health): fires after ``for_seconds`` of
  continuous trouble and resolves ``resolve_hold`` seconds after the trouble ends.

A restarted rank (a new boot) does not resolve its firing sampled alerts at once: the restart
counts as their last sighting, and they resolve ``resolve_hold`` seconds later unless the new boot
shows them again -- which is when the Prometheus rules, which saw the old boot's figures until the
restart, stop firing too (``keep_firing_for`` is the same hold).  No clean sample is needed: the
old boot's pools are gone with its process, and a source that cannot judge the new boot (a log
while the server is busy) would otherwise hold the old alert forever.
A rank that is gone for good is forgotten (:meth:`Tracker.forget`): its alerts resolve with a
reason.  A resolved alert stays listed for ``retention`` seconds so that receivers learn it is over.

Cost: alerts are indexed by subject (sampled) and by name, so a snapshot touches only its own
rank's alerts and the timer only the timed ones -- never every alert of every rank; the
annotations other than the description depend only on the alert and its labels and are built
once per alert instance, and an unchanged instance's :class:`Alert` is reused.  The listing's
order (and whether two sources hold one label set) is kept until an instance comes or goes or
changes severity, so listing costs one identity check per unchanged alert and one
:class:`Alert` per changed one.
Each instance's record is a :class:`~poolwatch.detect.track.Track` (:mod:`poolwatch.detect.track`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable, Set

from poolwatch.detect.alert import Alert, AlertState, Labels, Signal, Verdict, merge
from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.rules import by_name
from poolwatch.detect.schema import Mode
from poolwatch.detect.track import Annotate, Track

__all__ = ["Tracker"]

Key = tuple[str, Labels, str]


def _order_key(t: Track) -> tuple[str, Labels, str]:
    """The listing's order: by alert name, then labels, then severity."""
    return (t.signal.alert, t.signal.labels, t.signal.severity.value)


class Tracker:
    """Every alert instance of one detector, keyed by (alert name, identity labels)."""

    def __init__(self, config: DetectorConfig, annotate: Annotate) -> None:
        self._cfg = config
        self._annotate = annotate
        self._tracks: dict[Key, Track] = {}
        self._by_subject: dict[str, dict[Key, Track]] = {}  # sampled alerts of each subject
        self._by_alert: dict[str, dict[Key, Track]] = {}  # every instance of each alert
        self._order: tuple[list[Track], bool] | None = None  # listing order, and whether to merge
        self.fired = 0  # how many times an alert went from pending to firing (never decreases)

    def sample(
        self, subject: str, signals: Iterable[Signal], judged: Set[Verdict], sample_id: Hashable, now: float
    ) -> None:
        """One snapshot's verdicts on the sampled alerts of ``subject``: each signal is a bad
        sample; an alert in ``judged`` without a signal is a clean one; any other is untouched
        (the snapshot could not tell, e.g. coarse figures while busy)."""
        seen = set()
        for sig in signals:
            seen.add(sig.key)
            self._bad(sig, Mode.SAMPLED, sample_id, now)
        for key, track in list(self._by_subject.get(subject, {}).items()):
            if key not in seen and track.signal.verdict in judged:
                self._clean(key, track, sample_id, now)

    def events(self, signals: Iterable[Signal], now: float) -> None:
        """Log lines: each fires (or refreshes) its alert at once."""
        for sig in signals:
            self._bad(sig, Mode.EVENT, now, now)

    def timed(self, alerts: Collection[str], signals: Iterable[Signal], now: float) -> None:
        """The timer's verdict on every instance of the timed ``alerts``."""
        seen = set()
        for sig in signals:
            seen.add(sig.key)
            self._bad(sig, Mode.TIMED, now, now)
        mine = [(k, t) for alert in alerts for k, t in self._by_alert.get(alert, {}).items() if k not in seen]
        for key, track in mine:
            self._clean(key, track, now, now)

    def tick(self, now: float) -> None:
        """Time passes: hold times end, restored alerts nobody confirms expire, old ones go."""
        for key, track in list(self._tracks.items()):
            if track.state is AlertState.RESOLVED:
                if now - (track.resolved_at or now) >= self._cfg.retention:
                    self._drop(key)
            elif track.restored_at is not None and now - track.restored_at >= self._cfg.restore_grace:
                track.resolve(now)
            elif track.state is AlertState.FIRING:
                self._maybe_resolve(track, now)

    def reset(self, subject: str, now: float) -> None:
        """A restarted rank: pending sampled alerts never happened; firing ones were last seen now
        and resolve after ``resolve_hold`` unless the new boot shows them again."""
        for key, track in list(self._by_subject.get(subject, {}).items()):
            if track.state is AlertState.PENDING:
                self._drop(key)
            elif track.state is AlertState.FIRING:
                track.last_seen, track.clean, track.last_sample = now, 0, None
                track.restarted = True

    def forget(self, gone: Callable[[Signal], bool], reason: str, now: float) -> int:
        """Resolve (with ``reason``) or drop every alert whose signal is ``gone``; returns how many."""
        count = 0
        for key, track in list(self._tracks.items()):
            if not gone(track.signal) or track.state is AlertState.RESOLVED:
                continue
            count += 1
            if track.state is AlertState.PENDING:
                self._drop(key)
            else:
                track.resolve(now)
                track.reason = reason
        return count

    def restore(self, alerts: Iterable[Alert], now: float) -> None:
        """Take back firing alerts persisted before a restart; unconfirmed ones expire."""
        for alert in alerts:
            if alert.state is not AlertState.FIRING:
                continue
            mode = by_name(alert.name).mode
            description = alert.annotations.get("description", "")
            sig = Signal(alert.name, alert.subject, alert.severity, alert.labels, description, alert.value)
            last_seen = alert.last_seen if mode is Mode.EVENT else now
            self._put(
                Track(
                    sig,
                    mode,
                    AlertState.FIRING,
                    alert.active_since,
                    last_seen,
                    fired_at=alert.fired_at,
                    restored_at=now,
                )
            )

    def __len__(self) -> int:
        """How many alert instances are held (pending, firing, recently resolved)."""
        return len(self._tracks)

    def alerts(self) -> list[Alert]:
        """Every pending, firing and recently resolved alert, one per label set."""
        if self._order is None:
            tracks = sorted(self._tracks.values(), key=_order_key)
            identities = {(t.signal.alert, t.signal.severity, t.signal.labels) for t in tracks}
            self._order = (tracks, len(identities) != len(tracks))  # two sources hold one label set
        tracks, merging = self._order
        built = [t.alert(self._annotate) for t in tracks]
        return merge(built) if merging else built

    def _bad(self, sig: Signal, mode: Mode, sample_id: Hashable, now: float) -> None:
        track = self._tracks.get(sig.key)
        if track is None or track.state is AlertState.RESOLVED:
            track = Track(sig, mode, AlertState.PENDING, since=now, last_seen=now, last_sample=sample_id)
            self._put(track)
        else:
            if sig.severity is not track.signal.severity:
                self._order = None  # its place in the listing moves
            if track.state is AlertState.PENDING and sample_id != track.last_sample:
                track.samples += 1
            track.signal, track.last_seen, track.last_sample = sig, now, sample_id
            track.clean, track.restored_at, track.restarted = 0, None, False
        ready = track.samples >= sig.min_samples and now - track.since >= sig.for_seconds
        if track.state is AlertState.PENDING and ready:
            track.state, track.fired_at = AlertState.FIRING, now
            self.fired += 1

    def _clean(self, key: Key, track: Track, sample_id: Hashable, now: float) -> None:
        if track.state is AlertState.PENDING:
            self._drop(key)
        elif track.state is AlertState.FIRING and sample_id != track.last_sample:
            track.clean += 1
            track.last_sample, track.restored_at = sample_id, None
            self._maybe_resolve(track, now)

    def _maybe_resolve(self, track: Track, now: float) -> None:
        if track.due(self._cfg, now):
            track.resolve(now)

    def _put(self, track: Track) -> None:
        key = track.signal.key
        self._drop(key)
        self._order = None
        self._tracks[key] = track
        self._by_alert.setdefault(track.signal.alert, {})[key] = track
        if track.mode is Mode.SAMPLED:
            self._by_subject.setdefault(track.signal.subject, {})[key] = track

    def _drop(self, key: Key) -> None:
        track = self._tracks.pop(key, None)
        if track is None:
            return
        self._order = None
        for index, name in ((self._by_alert, track.signal.alert), (self._by_subject, track.signal.subject)):
            group = index.get(name)
            if group is not None and group.pop(key, None) is not None and not group:
                del index[name]
