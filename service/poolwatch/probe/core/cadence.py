"""The engine-neutral half of a probe: when to sample, the kill switch, containment and publishing.

An engine room's probe subclasses :class:`Cadence` and supplies what only it knows: how a sample is
taken and turned into a snapshot, its census detail (``census``), its health figures
(:meth:`Cadence._health`) and who the worker is while nothing may be read (:meth:`Cadence._whoami`).
Everything here runs on the engine's scheduler thread and never raises into it: a failure is
contained by :class:`~poolwatch.probe.core.containment.Guard` and shows in the probe's health.

At each step boundary (:meth:`Cadence.step`) the iteration count advances and, once
``sample_interval_s`` has passed (or the engine room asks for one at once), a sample is taken.
While the probe is off (``POST /v1/disable``, the ``DISABLE`` file, or the guard gave up) nothing is
read from the engine, but a pool-less heartbeat snapshot is published once a second so the kill
switch stays visible instead of going stale (:mod:`poolwatch.probe.core.switch`).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from poolwatch.model import ProbeHealth, Snapshot, WorkerId
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.containment import Guard
from poolwatch.probe.core.publication import Publication
from poolwatch.probe.core.switch import KillSwitch, heartbeat_snapshot
from poolwatch.probe.core.tripwires import TripwireLog

__all__ = ["Cadence", "Clock"]

Clock = Callable[[], float]


def _never() -> bool:
    return False


class Cadence:
    """One scheduler's probe, less what its engine room adds."""

    def __init__(
        self,
        scheduler: object,
        config: ProbeConfig,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Clock = time.monotonic,
        wall: Clock = time.time,
    ) -> None:
        self.scheduler = scheduler
        self.config = config
        self.environ = dict(os.environ if environ is None else environ)
        if config.worker:
            self.environ["POOLWATCH_WORKER"] = config.worker
        self.clock, self.wall = clock, wall
        self.boot_id = uuid.uuid4().hex[:16]
        self.started_at = wall()
        self.guard = Guard(config.max_consecutive_errors)
        self.tripwires = TripwireLog()
        self.seq = 0
        self.publication = Publication()
        self.switch = KillSwitch(config.directory)
        self.publisher: Any = None  # set by the engine room's attach when serving
        self._last_sample = -float("inf")
        self._sample_cost = 0.0

    # -- what the engine room supplies ----------------------------------------------------------

    @property
    def census(self) -> dict[str, Any] | None:
        """The last census detail (``GET /v1/census``)."""
        return None

    def _health(self) -> ProbeHealth:
        raise NotImplementedError

    def _whoami(self) -> WorkerId:
        """The worker's identity, for the heartbeat published before any sample."""
        raise NotImplementedError

    # -- the published snapshot -----------------------------------------------------------------

    @property
    def latest(self) -> Snapshot | None:
        return self.publication.latest

    @latest.setter
    def latest(self, snapshot: Snapshot | None) -> None:
        self._swap(snapshot)

    def _swap(self, snapshot: Snapshot | None) -> None:
        """Make ``snapshot`` the published one (an engine room may take a lock around it)."""
        self.publication.publish(snapshot)

    def _publish_health(self) -> None:
        if self.latest is not None:
            self._swap(replace(self.latest, probe=self._health()))

    # -- the cadence ----------------------------------------------------------------------------

    def step(self, sample: Callable[[], None], now: Callable[[], bool] = _never) -> None:
        """A step boundary: the previous iteration is complete.  ``sample`` runs when the sample
        interval has passed or ``now()`` says so (asked only when the interval has not)."""
        self.seq += 1
        if self._due(self._last_sample, self.config.sample_interval_s) or now():
            self._guarded("sample", sample)
        elif self.disabled and self.switch.heartbeat_due(self.clock()):
            self._guarded("heartbeat", self._heartbeat)

    def disable(self) -> None:
        self.switch.runtime = True
        self._publish_health()

    def enable(self) -> None:
        self.switch.runtime = False

    @property
    def disabled(self) -> bool:
        return self.switch.off or self.guard.gave_up

    def _active(self) -> bool:
        self.switch.look(self.clock())
        return not self.disabled

    def _due(self, last: float, interval: float) -> bool:
        return self.clock() - last >= interval and self._active() and self.guard.allow()

    def _guarded(self, where: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as exc:
            self.guard.failed(where, exc)
            self._publish_health()

    def _heartbeat(self) -> None:
        """Disabled: publish who we are and that we are off, with no pool figures (nothing read)."""
        self.switch.last_heartbeat = self.clock()
        self._swap(
            heartbeat_snapshot(
                self.latest,
                self._whoami,
                seq=self.seq,
                taken_at=self.wall(),
                health=self._health(),
                boot_id=self.boot_id,
            )
        )
