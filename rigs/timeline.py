"""A run recorded in engine steps: the first wrong act, the probe's first finding, the first page,
and the engine's own signal -- what a real-bug entry reports (issue 39's table), for either engine.

The driver counts engine steps (SGLang's loop boundaries, vLLM's schedule/update steps); the entry
says when its trigger did the first wrong thing (:meth:`Timeline.wrong`) and when the engine itself
said something (:meth:`Timeline.engine_said`: an assert, an idle check raising or reporting a leak);
every snapshot the probe published is handed to :meth:`Timeline.look`, which judges it twice: as
the probe's own *finding* (a tripwire naming slots, a refused or repaired free, a pool out of
balance), and through the sidecar's :class:`~poolwatch.detect.detector.Detector` with the shipped
thresholds, whose first critical alert firing is the *page*.  Every alert that fires is kept too,
whatever its severity (``alerts``: each name's first firing step and severity; ``alert``: the first
critical or warning one), so a warning-severity detector -- a stranded hold, a counter
disagreement -- is on the record beside the page.  The detector's clock is the engine's steps
(``seconds_per_step`` each), so its hold times are counted in steps too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from poolwatch.conservation import Balance, findings
from poolwatch.detect.alert import AlertState
from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.detector import Detector
from poolwatch.detect.schema import Severity
from poolwatch.model.snapshot import Snapshot

__all__ = ["EPOCH", "Fired", "Mark", "Timeline"]

EPOCH = 1_800_000_000.0  # the unix time of engine step 0


@dataclass(frozen=True)
class Mark:
    """The first time one thing happened: its engine step and what it was."""

    step: int
    what: str


@dataclass(frozen=True)
class Fired:
    """The first time one alert fired: its engine step, its name and its severity."""

    step: int
    name: str
    severity: str


@dataclass
class Timeline:
    """First wrong act -> probe finding -> page -> engine's own signal, in engine steps."""

    seconds_per_step: float = 0.1  # an engine step's wall time for the detector's hold times
    config: DetectorConfig = field(default_factory=DetectorConfig)
    wrong_act: Mark | None = None
    finding: Mark | None = None
    page: Mark | None = None
    engine: Mark | None = None
    alerts: dict[str, Fired] = field(default_factory=dict)  # each alert's first firing, in order
    snapshots: int = 0  # how many snapshots the probe published (0: it read nothing)
    _step: int = 0
    _detector: Detector | None = None

    def __post_init__(self) -> None:
        self._detector = Detector(self.config, self._now)

    def _now(self) -> float:
        return self.at(self._step)

    def at(self, step: int) -> float:
        """The wall time of engine step ``step`` (unix seconds): the detector's clock, and the
        probe's where the driver gives it this clock (so the ages of its holds and stalls are
        engine time, as the detector's hold times are)."""
        return EPOCH + step * self.seconds_per_step

    def wrong(self, step: int, what: str) -> None:
        """The trigger's first wrong act (later ones are not recorded)."""
        self.wrong_act = self.wrong_act or Mark(step, what)

    def engine_said(self, step: int, what: str) -> None:
        """The engine's own signal: its assert, or its idle or busy check reporting the fault."""
        self.engine = self.engine or Mark(step, what)

    def look(self, step: int, snap: Snapshot | None) -> None:
        """One snapshot the probe published at engine step ``step``."""
        if snap is None:
            return
        self.snapshots += 1
        self._step = step
        if self.finding is None:
            said = _finding(snap)
            self.finding = Mark(step, said) if said else None
        assert self._detector is not None
        self._detector.observe(snap)
        for alert in self._detector.evaluate():
            if alert.state is not AlertState.FIRING:
                continue
            if alert.name not in self.alerts:
                self.alerts[alert.name] = Fired(step, alert.name, alert.severity.value)
            if self.page is None and alert.severity is Severity.CRITICAL:
                self.page = Mark(step, alert.name)

    @property
    def alert(self) -> Fired | None:
        """The first alert that fired and asks for someone -- critical (a page) or warning (a
        ticket); an info alert is context (``None``: none did)."""
        wanted = (Severity.CRITICAL.value, Severity.WARNING.value)
        return next((f for f in self.alerts.values() if f.severity in wanted), None)

    def row(self) -> dict[str, Any]:
        """The record: each mark's step and what it was (``None``: never), and the steps from the
        wrong act to each of the others; ``alert`` (step, name, severity) is the first critical or
        warning alert that fired and ``alerts`` every alert's first firing, ``{name: [step, severity]}``."""
        marks = {
            "wrong_act": self.wrong_act,
            "finding": self.finding,
            "page": self.page,
            "engine": self.engine,
        }
        out: dict[str, Any] = {k: (m.step, m.what) if m else None for k, m in marks.items()}
        first = self.alert
        out["alert"] = (first.step, first.name, first.severity) if first else None
        out["alerts"] = {f.name: [f.step, f.severity] for f in self.alerts.values()}
        out["snapshots"] = self.snapshots
        start = self.wrong_act.step if self.wrong_act else None
        steps: dict[str, Mark | Fired | None] = {**marks, "alert": first}
        for name in ("finding", "page", "alert", "engine"):
            mark = steps[name]
            out[f"steps_to_{name}"] = mark.step - start if mark is not None and start is not None else None
        return out

    @property
    def named_first(self) -> bool:
        """The probe named the fault before the engine's own signal (or the engine never signalled)."""
        return self.finding is not None and (self.engine is None or self.finding.step <= self.engine.step)


def _finding(snap: Snapshot) -> str:
    """What the probe found in ``snap`` ("" when nothing): tripwires, guard's actions, imbalance."""
    if snap.tripwires:
        wire = snap.tripwires[0]
        return f"tripwire {wire.kind.value} on {wire.pool.value} {list(wire.slots)[:8]}"
    if snap.repairs:
        repair = snap.repairs[0]
        return f"guard {repair.kind.value} on {repair.pool.value} at {repair.hook}"
    for pool, found in findings(snap).items():
        if found.balance in (Balance.DEFICIT, Balance.SURPLUS):
            return f"{found.balance.value} of {abs(found.gap or 0)} on {pool.value}"
    return ""
