"""What a probe publishes, and how: a sample's snapshot, the heartbeat while it is off, its health,
and the last word of a rank about to die.

:class:`Stamping` is the output side of :class:`~poolwatch.probe.core.probe.Probe` (which decides
*when* to read and census; this decides *what* goes out): every snapshot is swapped into the
:class:`~poolwatch.probe.core.publication.Publication` under one lock (the scheduler thread's
publishes against the endpoint's keepalive re-stamp), stamped with the probe's boot id, sequence
and health.  A room adds health flags through :meth:`Stamping._health_extras`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from poolwatch.model.holds import Hold
from poolwatch.model.progress import Progress
from poolwatch.model.rank import Role, WorkerId
from poolwatch.model.snapshot import ProbeHealth, Snapshot
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.containment import Guard
from poolwatch.probe.core.counters import CounterBook
from poolwatch.probe.core.engine import EngineSample, Reader
from poolwatch.probe.core.final_file import write_final_snapshot
from poolwatch.probe.core.kill_switch import KillSwitch, heartbeat_snapshot
from poolwatch.probe.core.last_word import Outcome, await_collection
from poolwatch.probe.core.publication import Publication
from poolwatch.probe.core.rank_identity import RankIdentity
from poolwatch.probe.core.reading import Reading
from poolwatch.probe.core.repairs import RepairLog
from poolwatch.probe.core.tripwires import TripwireLog

__all__ = ["Stamping"]


class Stamping:
    """The publishing half of a probe (mixed into :class:`~poolwatch.probe.core.probe.Probe`, which
    sets every attribute named here)."""

    config: ProbeConfig
    reader: Reader
    identity: RankIdentity
    guard: Guard
    switch: KillSwitch
    tripwires: TripwireLog
    repairs: RepairLog
    counters: CounterBook
    publication: Publication
    publisher: Any  # set by lifecycle.attach when serving
    last_word: Outcome | None  # how the last wait for the sidecar ended (None: none)
    boot_id: str
    seq: int
    clock: Callable[[], float]
    wall: Callable[[], float]
    census_cost: float
    census_total: int
    _sample_cost: float
    _lock: threading.Lock
    final_cost = 0.0  # seconds the final snapshot's write took (0: none written)
    holds: tuple[Hold, ...] = ()  # what the last sample found waiting (core/waiting.py)
    progress: Progress | None = None

    @property
    def latest(self) -> Snapshot | None:
        return self.publication.latest

    @latest.setter
    def latest(self, snapshot: Snapshot | None) -> None:
        self._swap(snapshot)

    def _swap(self, snapshot: Snapshot | None) -> None:
        with self._lock:
            self.publication.publish(snapshot)

    def last_words(self) -> None:
        """The room knows this rank dies next: wait, bounded, until the sidecar was handed what is
        published now (:mod:`~poolwatch.probe.core.last_word`); no wait when nothing is served."""
        snap = self.latest
        serving = self.config.serve and self.publisher is not None and snap is not None
        publication = self.publication if serving else None
        seq, version = (snap.seq, self.publication.version) if snap is not None else (0, 0)
        bound, grace = self.config.last_word_wait_s, self.config.last_word_grace_s
        self.last_word = await_collection(publication, seq, bound, version=version, grace=grace)

    def leave_final(self, snap: Snapshot) -> None:
        """The room knows this rank dies next: write ``snap`` as its final snapshot file, so the
        proof still pages when the process is gone before a long-poll collected it
        (:mod:`~poolwatch.probe.core.final_file`); a failed write is noted, never raised."""
        try:
            secret = getattr(self.publisher, "secret", None)
            self.final_cost = write_final_snapshot(self.config.directory, snap, secret)
        except OSError as exc:
            self.guard.note("final", f"{type(exc).__name__}: {exc}")

    def _publish_health(self) -> None:
        if self.latest is not None:
            self._swap(replace(self.latest, probe=self._health()))

    def _snapshot(self, sample: EngineSample, reading: Reading) -> Snapshot:
        return Snapshot(
            worker=self.worker(sample.role, reading),
            seq=self.seq,
            taken_at=self.wall(),
            phase=sample.phase,
            pools=sample.pools,
            source="probe",
            queues=sample.queues,
            tripwires=self.tripwires.all(),
            repairs=self.repairs.all(),
            probe=self._health(),
            idle_check_strict=self.reader.idle_check_strict,
            boot_id=self.boot_id,
            holds=self.holds,
            progress=self.progress,
            witnesses=self.counters.all(),
        )

    def worker(self, role: Role, reading: Reading) -> WorkerId:
        """Who this rank is, in ``role`` (read once per role: :mod:`~poolwatch.probe.core.rank_identity`)."""
        return self.identity.of(role, reading)

    def announce(self, reading: Reading) -> tuple[WorkerId, int]:
        """Who the rank is and its index on the node (the endpoint's discovery file)."""
        return self.worker(Role.UNIFIED, reading), self.reader.local_index(reading)

    def _health_extras(self) -> dict[str, bool]:
        """The room's own health flags (``guard``, ``guard_return``): an extension point."""
        return {}

    def _health(self) -> ProbeHealth:
        return self.guard.health(
            sample_cost=self._sample_cost,
            census_cost=self.census_cost,
            census_total=self.census_total,
            disabled=self.switch.off,
            tripwires_dropped=self.tripwires.dropped,
            **self._health_extras(),
        )

    def _heartbeat(self) -> None:
        """Disabled: publish who we are and that we are off, with no pool figures (nothing read)."""
        self.switch.last_heartbeat = self.clock()
        self._swap(
            heartbeat_snapshot(
                self.latest,
                lambda: self.worker(Role.UNIFIED, Reading()),
                seq=self.seq,
                taken_at=self.wall(),
                health=self._health(),
                boot_id=self.boot_id,
            )
        )
