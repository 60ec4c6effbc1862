"""The detector watching an emulated SGLang deployment through the real in-process probe (what the
detector tests, the probe's emulator tests and ``benchmarks/bench_long_run.py`` run).

Every rank of the emulator gets :func:`poolwatch.probe.lifecycle.attach` (not served: the harness reads
``probe.latest``), reading the simulated clock.  After each cluster step the new snapshots go into
a :class:`~poolwatch.sidecar.store.SnapshotStore` the detector subscribes to, and the detector's timer runs
every simulated second, as in the sidecar.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from poolwatch.detect.alert import Alert, AlertState
from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.detector import Detector
from poolwatch.model.rank import Role
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.lifecycle import attach, probe_of
from poolwatch.probe.sglang.engine import SGLANG
from poolwatch.sidecar.store import SnapshotStore
from poolwatch.sources.logfile.fold import LogFold
from poolwatch.sources.sglang.log.dialect import DIALECT
from poolwatch_emulator.cluster import Cluster
from poolwatch_emulator.cluster_config import ClusterConfig
from poolwatch_emulator.logs import MemorySink
from rigs.log_records import records as log_records

EPOCH = 1_767_225_600.0  # 2026-01-01: simulated time 0 as unix time


@dataclass
class Counts:
    """What the emulated deployment went through (to show a soak exercised the risky paths)."""

    chunk_steps: int = 0
    aborts: int = 0
    retractions: int = 0
    snapshots: int = 0


@dataclass
class Firing:
    """When an alert was first seen firing: simulated seconds and cluster step."""

    alert: Alert
    at: float
    step: int


@dataclass
class Watched:
    config: ClusterConfig
    directory: Path
    detector_config: DetectorConfig = field(default_factory=DetectorConfig)
    sample_every: int = 1  # probe snapshots fed to the store every N steps
    sample_interval: float = 0.0  # simulated seconds between the probe's samples (0: every iteration)
    guard: bool = False  # the probe's guard mode (POOLWATCH_PROBE_GUARD=1)

    def __post_init__(self) -> None:
        self.cluster = Cluster(self.config)
        self.store = SnapshotStore(history=4)
        self.detector = Detector(self.detector_config, self.now)
        self.store.subscribe(self.detector.observe)
        self.counts = Counts()
        self.struck: dict[str, tuple[int, str, int]] = {}  # fault -> (step, worker, dp) of its first strike
        self.crashed_at: dict[str, int] = {}  # worker -> the step it crashed in
        self.first_firing: dict[tuple[str, tuple[tuple[str, str], ...]], Firing] = {}
        self._next_eval = 0.0
        for worker in self.cluster.workers:
            conf = ProbeConfig(
                directory=str(self.directory),
                serve=False,
                worker=worker.name,
                release=self.cluster.release.name,
                sample_interval_s=self.sample_interval,
                guard=self.guard,
            )
            for rank in worker.ranks:
                probe = attach(SGLANG, rank, conf, serve=False)
                probe.wall = self.now
                probe.clock = lambda: self.cluster.clock.now
                self._count_aborts(rank)

    def now(self) -> float:
        return self.cluster.clock.unix()

    def _count_aborts(self, rank: Any) -> None:
        original: Callable[[Any], None] = rank.abort_request

        def counted(abort: Any) -> None:
            self.counts.aborts += 1
            original(abort)

        rank.abort_request = counted

    def step(self) -> None:
        self.cluster.step()
        self._note_faults_and_crashes()
        ranks = self.cluster.schedulers
        self.counts.chunk_steps += sum(1 for r in ranks if r.chunked_req is not None)
        if self.cluster.steps % self.sample_every == 0:
            for rank in ranks:
                probe = probe_of(rank)
                if probe is not None and probe.latest is not None and self.store.put(probe.latest):
                    self.counts.snapshots += 1
        if self.cluster.clock.now >= self._next_eval:
            self._next_eval = self.cluster.clock.now + 1.0
            self.detector.evaluate(latest=self.store.latest(), targets=self.store.targets())
        self._record(self.detector.alerts())

    def _note_faults_and_crashes(self) -> None:
        step = self.cluster.steps
        for worker in self.cluster.workers:
            if worker.crashed:
                self.crashed_at.setdefault(worker.name, step)
            for rank in worker.ranks:
                for name in rank.faults.fired:
                    self.struck.setdefault(name, (step, worker.name, rank.dp_rank))

    def _record(self, alerts: list[Alert]) -> None:
        for a in alerts:
            if a.state is AlertState.FIRING and (a.name, a.labels) not in self.first_firing:
                self.first_firing[(a.name, a.labels)] = Firing(a, self.cluster.clock.now, self.cluster.steps)

    def run_until(self, done: Callable[[], bool], max_steps: int) -> bool:
        for _ in range(max_steps):
            if done():
                return True
            self.step()
        return done()

    def feed_log(self, worker_name: str) -> int:
        """Read the worker's log as the sidecar's log source would, into the store; the count."""
        worker = next(w for w in self.cluster.workers if w.name == worker_name)
        assert isinstance(worker.sink, MemorySink)
        fold = LogFold(worker.name, Role(worker.role), engine=DIALECT.engine, source=DIALECT.source)
        lines = [line for entry in worker.sink.lines for line in entry.split("\n")]  # as a file holds them
        records = log_records(DIALECT, lines)
        snaps = [s for r in records for e in DIALECT.interpret(r) if (s := fold.apply(e)) is not None]
        return sum(self.store.put(s) for s in snaps)

    def retractions(self) -> int:
        return sum(int(r.num_retracted_reqs) for r in self.cluster.schedulers)
