"""The detector watching an emulated SGLang deployment through the real in-process probe.

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

from tests.sources.logs import records as log_records

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
from poolwatch_emulator.build import ModelShape
from poolwatch_emulator.cluster import Cluster
from poolwatch_emulator.cluster_config import ClusterConfig
from poolwatch_emulator.faults import FAULTS, parse_fault
from poolwatch_emulator.logs import MemorySink
from poolwatch_emulator.workload import WorkloadConfig

EPOCH = 1_767_225_600.0  # 2026-01-01: simulated time 0 as unix time
SWA_SHAPE = ModelShape(mamba_slots=None, swa_kv_tokens=131_072, page_size=16, context_len=32_768)


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


ABORTY = WorkloadConfig(rate=12.0, abort_fraction=0.3, abort_within_s=3.0)  # many aborts, a queue


def scenario(fault: str, trigger: str = "", **overrides: Any) -> ClusterConfig:
    """A deployment where ``fault`` can strike: its roles (unified when it can), its model shape,
    the newest release it exists in, and traffic that gives it chances soon."""
    info = FAULTS[fault]
    pd = "unified" not in info.roles
    base: dict[str, Any] = {
        "prefill": int(pd),
        "decode": int(pd),
        "unified": int(not pd),
        "version": info.emulated_versions[-1],
        "shape": SWA_SHAPE if "swa" in info.needs else ModelShape(context_len=32_768),
        "workload": ABORTY if "abort" in fault else WorkloadConfig(),
        "faults": (parse_fault(f"{fault}{trigger}"),),
        "seed": 7,
        "epoch": EPOCH,
    }
    base.update(overrides)
    return ClusterConfig(**base)


def soak_config(version: str, seed: int) -> ClusterConfig:
    """Heavy fault-free PD traffic: long prompts chunked at 1024 tokens, decode KV pressure that
    forces retractions, 5 % of requests aborted, 30-minute bursts with 5-minute quiet gaps (so
    SGLang's idle checks run too)."""
    return ClusterConfig(
        prefill=1,
        decode=1,
        version=version,
        seed=seed,
        epoch=EPOCH,
        dt=0.5,
        chunked_prefill_size=1024,
        shape=ModelShape(full_kv_tokens=49_152, max_running_requests=96, mamba_slots=288, context_len=32_768),
        workload=WorkloadConfig(
            rate=0.35,
            prompt_median=1400,
            output_median=80,
            abort_fraction=0.05,
            abort_within_s=20,
            burst_s=1800,
            gap_s=300,
        ),
    )


@dataclass(frozen=True)
class SoakResult:
    version: str
    seed: int
    hours: float
    alerts: tuple[tuple[str, str, str], ...]  # (name, severity, labels) of every alert that fired
    counts: Counts
    retractions: int
    crashed: tuple[str, ...]
    repairs: int = 0  # slots the probes' guard repaired (guard mode only)
    refusing: int = 0  # ranks whose Mamba free guard v2 wraps (guard mode, every release family)
    refused: int = 0  # slots guard v2 refused to free (also counted in ``repairs``)


def soak(version: str, seed: int, hours: float, directory: str, guard: bool = False) -> SoakResult:
    """Run fault-free traffic for ``hours`` simulated hours under the probe and the detector."""
    w = Watched(soak_config(version, seed), Path(directory), sample_interval=1.0, guard=guard)
    end = hours * 3600.0
    while w.cluster.clock.now < end and not w.cluster.crashed:
        w.step()
    fired = tuple(
        (f.alert.name, f.alert.severity.value, str(dict(f.alert.labels))) for f in w.first_firing.values()
    )
    crashed = tuple(f"{c.name}: {c.crash_message}" for c in w.cluster.crashed)
    repairs = sum(
        r.count
        for rank in w.cluster.schedulers
        if (p := probe_of(rank)) is not None and p.latest is not None
        for r in p.latest.repairs
    )
    probes = [p for rank in w.cluster.schedulers if (p := probe_of(rank)) is not None]
    refusing = sum(1 for p in probes if p.refuser is not None)
    refused = sum(p.refuser.refused for p in probes if p.refuser is not None)
    hours_run = w.cluster.clock.now / 3600.0
    return SoakResult(
        version, seed, hours_run, fired, w.counts, w.retractions(), crashed, repairs, refusing, refused
    )
