"""The probe attached to one scheduler: samples, censuses and tripwires at loop boundaries.

Every entry point is called from SGLang's scheduler thread (through :mod:`poolwatch.probe.hooks`)
and never raises: failures are contained by :class:`~poolwatch.probe.guard.Guard`.  Results are
published through :class:`~poolwatch.probe.publication.Publication` (``publication.publish``
swaps the ``latest`` reference and wakes long-polls) and one ``census`` reference the HTTP
threads read; the scheduler thread never blocks on I/O except one ``stat`` per second for the
``DISABLE`` file.  While disabled, the probe reads nothing from the scheduler but still publishes
a pool-less heartbeat snapshot (``probe.disabled``) once a second, so the kill switch stays
visible (PoolwatchProbeDegraded can fire) instead of going stale; removing the ``DISABLE`` file
re-enables it (``POST /v1/disable`` is undone only by ``/v1/enable``).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from poolwatch.model import Phase, Pool, PoolAccount, ProbeHealth, Snapshot, WorkerId
from poolwatch.probe.access import Reading
from poolwatch.probe.census import PoolCensus, mamba_census
from poolwatch.probe.config import ProbeConfig
from poolwatch.probe.final import Suspicion, check_fails, write_final_snapshot
from poolwatch.probe.guard import Guard
from poolwatch.probe.identity import sglang_version, worker_identity
from poolwatch.probe.kv_census import kv_census
from poolwatch.probe.publication import Publication
from poolwatch.probe.repair import Repairer, census_of
from poolwatch.probe.report import census_doc
from poolwatch.probe.shapes import SHAPES, Shape, shape_for_version
from poolwatch.probe.snapshot import Sample, build_snapshot, idle_check_strict, take_sample
from poolwatch.probe.totals import Memo
from poolwatch.probe.tripwires import TripwireLog, chunk_tripwires
from poolwatch.probe.waiting import WaitingHolders

__all__ = ["DISABLE_FILE", "Probe"]

DISABLE_FILE = "DISABLE"  # in the discovery directory: every rank on the node stops
HEARTBEAT_S = 1.0  # while disabled, a pool-less snapshot this often keeps the switch visible
Clock = Callable[[], float]


class Probe:
    """One scheduler rank's probe."""

    def __init__(
        self,
        scheduler: object,
        config: ProbeConfig,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Clock = time.monotonic,
        wall: Clock = time.time,
        shape: Shape | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.config = config
        self.environ = dict(os.environ if environ is None else environ)
        if config.worker:
            self.environ["POOLWATCH_WORKER"] = config.worker
        self.clock, self.wall = clock, wall
        self.version = config.sglang_version or sglang_version()
        self.shape = shape or _shape_of(self.version)
        self.boot_id = uuid.uuid4().hex[:16]
        self.started_at = wall()
        self.guard = Guard(config.max_consecutive_errors)
        self.tripwires = TripwireLog()
        self.seq = 0
        self.publication = Publication()
        self.census: dict[str, Any] | None = None
        self.runtime_disabled = False
        self.file_disabled = False  # the DISABLE file exists (checked once a second)
        self._last_heartbeat = -float("inf")
        self.publisher: Any = None  # set by hooks.attach when serving
        self._last_sample = -float("inf")
        self._last_census = self._last_kv = clock()  # busy censuses start one interval in
        self.waiting = WaitingHolders()  # the waiting queue's Mamba holders between exact scans
        self._memo = Memo()  # what did not change, kept from one sample to the next
        self._last_exact_waiting = -float("inf")
        self._identity: dict[str, WorkerId] = {}  # by role, read once
        self._last_switch_check = -float("inf")
        self._sample_cost = self._census_cost = 0.0
        self._census_total = 0
        self._was_idle = False
        self._has_mamba = True  # until a sample shows the model has no Mamba pool
        self._strict = idle_check_strict(self.shape, self.environ)
        self.repairer = Repairer(self.shape) if config.guard else None  # opt-in guard mode
        self._idle_seq = -1  # the iteration of the last idle hook
        self._suspicion = Suspicion()
        self.final_cost = 0.0  # seconds the final snapshot's write took (0: none written)

    # -- entry points (scheduler thread) -------------------------------------------------------

    @property
    def latest(self) -> Snapshot | None:
        return self.publication.latest

    @latest.setter
    def latest(self, snapshot: Snapshot | None) -> None:
        self.publication.publish(snapshot)

    def on_loop_boundary(self, hook: str) -> None:
        """Start of a scheduler iteration: the previous one is complete."""
        self.seq += 1
        if self._due(self._last_sample, self.config.sample_interval_s):
            self._guarded("sample", lambda: self._sample(hook))
        elif self.disabled and self.clock() - self._last_heartbeat >= HEARTBEAT_S:
            self._guarded("heartbeat", self._heartbeat)

    def on_idle(self, hook: str) -> None:
        """SGLang is about to run its own idle check: look first -- always at the first idle
        check after work (the one that crashes a broken rank), else at the sample rate."""
        fresh = self._idle_seq < self.seq - 1
        self._idle_seq = self.seq
        due = self._due(self._last_sample, self.config.sample_interval_s)
        if due or (fresh and self._active() and self.guard.allow()):
            self._guarded("idle", lambda: self._sample(hook, idle_check=True))

    def after_prefill_chunk(self, hook: str) -> None:
        """Right after ``process_prefill_chunk``: the direct #12994 tripwire (one slot vs the free list)."""
        if self.config.chunk_tripwire and self._active():
            self._guarded("chunk", lambda: self._chunk(hook))

    def sample_now(self, hook: str = "manual") -> Snapshot | None:
        """Take a snapshot regardless of the rate (tests, benchmarks, the emulator)."""
        if self._active():
            self._guarded("sample", lambda: self._sample(hook))
        return self.latest

    def disable(self) -> None:
        self.runtime_disabled = True
        self._publish_health()

    def enable(self) -> None:
        self.runtime_disabled = False

    @property
    def disabled(self) -> bool:
        return self.runtime_disabled or self.file_disabled or self.guard.gave_up

    # -- internals ----------------------------------------------------------------------------

    def _active(self) -> bool:
        now = self.clock()
        if now - self._last_switch_check >= 1.0:
            self._last_switch_check = now
            self.file_disabled = os.path.exists(os.path.join(self.config.directory, DISABLE_FILE))
        return not self.disabled

    def _due(self, last: float, interval: float) -> bool:
        return self.clock() - last >= interval and self._active() and self.guard.allow()

    def _guarded(self, where: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as exc:
            self.guard.failed(where, exc)
            self._publish_health()

    def _take(self, reading: Reading, *, idle_check: bool) -> Sample:
        """One sample; the waiting queue is scanned exactly at SGLang's idle hook and at least
        once per Mamba census interval (and whenever recalling it leaves a gap, see snapshot)."""
        now = self.clock()
        interval = self.config.census_interval_s
        exact = idle_check or now - min(self._last_exact_waiting, self._last_census) >= interval
        sample = take_sample(
            self.scheduler,
            self.shape,
            reading,
            waiting=self.waiting,
            exact_waiting=exact,
            memo=self._memo,
        )
        if sample.live.waiting_exact:
            self._last_exact_waiting = now
        return sample

    def _sample(self, hook: str, *, idle_check: bool = False) -> None:
        started = time.perf_counter()
        reading = Reading()
        sample = self._take(reading, idle_check=idle_check)
        self._last_sample = self.clock()
        force = self._suspicion.due(sample, idle_check=idle_check, guard=self.repairer is not None)
        found = self._maybe_census(sample, reading, hook, force=force)
        if self.repairer is not None and self._repair(found, sample.pools, sample.phase, hook):
            reading = Reading()  # the repaired figures are the ones to publish (and to judge)
            sample = self._take(reading, idle_check=True)
        for label, message in reading.failures.items():
            self.guard.note(label, message)
        self.guard.succeeded()
        self._sample_cost = time.perf_counter() - started
        self._publish(sample, reading, final=idle_check and self._strict and check_fails(sample))

    def _maybe_census(self, sample: Sample, reading: Reading, hook: str, *, force: bool) -> list[PoolCensus]:
        idle = sample.phase is Phase.IDLE
        entering_idle, self._was_idle = idle and not self._was_idle, idle
        now = self.clock()
        mamba_due = force or entering_idle or now - self._last_census >= self.config.census_interval_s
        kv_gap = self.config.idle_kv_census_gap_s if idle else self.config.kv_census_interval_s
        kv_due = force or ((entering_idle or not idle) and now - self._last_kv >= kv_gap)
        self._has_mamba = Pool.MAMBA in sample.pools  # a model without one has nothing to census
        mamba_due = mamba_due and self._has_mamba
        if mamba_due or kv_due:
            return self._census(sample, reading, hook, mamba=mamba_due, kv=kv_due, idle=idle)
        return []

    def _repair(
        self, found: list[PoolCensus], pools: Mapping[Pool, PoolAccount], phase: Phase, hook: str
    ) -> bool:
        """Guard mode: act on what the censuses prove (settling those findings); True if a free
        list changed.  A lost slot is returned only with the pool's exact gap at full idle."""
        assert self.repairer is not None
        settled = self.repairer.act_all(self.scheduler, found, pools, phase, hook, self.seq)
        for kinds, pool, slots in settled:
            self.tripwires.settle(kinds, pool, slots)
        return bool(settled)

    def _census(
        self, sample: Sample, reading: Reading, hook: str, *, mamba: bool, kv: bool, idle: bool
    ) -> list[PoolCensus]:
        started = time.perf_counter()
        found: list[PoolCensus] = []
        if mamba:
            self._last_census = self.clock()
            result = mamba_census(self.scheduler, self.shape, reading, sample.live, idle=idle)
            found += [result] if result is not None else []
        if kv:
            self._last_kv = self.clock()
            result = kv_census(self.scheduler, self.shape, reading, sample.live, idle=idle)
            found += [result] if result is not None else []
        for pool_census in found:
            self.tripwires.add(pool_census.tripwires(hook, self.seq))
        self._census_total += 1
        self._census_cost = time.perf_counter() - started
        self.census = census_doc(
            found, seq=self.seq, hook=hook, taken_at=self.wall(), cost=self._census_cost, phase=sample.phase
        )
        return found

    def _chunk(self, hook: str) -> None:
        if not self._has_mamba:
            return
        reading = Reading()
        found = chunk_tripwires(self.scheduler, self.shape, reading, self.seq, hook)
        for label, message in reading.failures.items():
            self.guard.note(label, message)
        if not found or not self.tripwires.add(found):
            return
        if self.repairer is not None:  # quarantine before the next allocation can hand it out
            self._repair(census_of(found), {}, Phase.BUSY, hook)
        self._guarded("sample", lambda: self._sample(hook))  # publish the proof (or repair) at once

    def _publish(self, sample: Sample, reading: Reading, *, final: bool = False) -> None:
        worker = self._identity.get(sample.role)
        if worker is None:  # ranks, model and worker name are fixed for the scheduler's life
            worker = worker_identity(self.scheduler, reading, sample.role, self.version, self.environ)
            self._identity[sample.role] = worker
        snap = build_snapshot(
            sample,
            worker=worker,
            seq=self.seq,
            taken_at=self.wall(),
            tripwires=self.tripwires.all(),
            health=self._health(),
            strict=self._strict,
            boot_id=self.boot_id,
        )
        if self.repairer is not None or final:
            snap = replace(snap, repairs=self.repairer.repairs() if self.repairer else (), final=final)
        if final:  # SGLang raises next: the file must exist before the process is gone
            try:
                self.final_cost = write_final_snapshot(self.config.directory, snap)
            except OSError as exc:
                self.guard.note("final", f"{type(exc).__name__}: {exc}")
        self.latest = snap

    def _health(self) -> ProbeHealth:
        return self.guard.health(
            sample_cost=self._sample_cost,
            census_cost=self._census_cost,
            census_total=self._census_total,
            disabled=self.runtime_disabled or self.file_disabled,
            tripwires_dropped=self.tripwires.dropped,
            guard=self.repairer is not None,
        )

    def _publish_health(self) -> None:
        if self.latest is not None:
            self.latest = replace(self.latest, probe=self._health())

    def _heartbeat(self) -> None:
        """Disabled: publish who we are and that we are off, with no pool figures (nothing read)."""
        self._last_heartbeat = self.clock()
        last = self.latest
        if last is None:
            worker = worker_identity(self.scheduler, Reading(), "", self.version, self.environ)
            last = Snapshot(
                worker=worker, seq=self.seq, taken_at=0.0, phase=Phase.UNKNOWN, pools={}, source="probe"
            )
        self.latest = replace(
            last, seq=self.seq, taken_at=self.wall(), phase=Phase.UNKNOWN, pools={}, tripwires=(),
            incidents=(), probe=self._health(), boot_id=self.boot_id,
        )  # fmt: skip


def _shape_of(version: str) -> Shape:
    """The family of ``version``; the newest known one for an empty or unreadable version."""
    try:
        return shape_for_version(version)
    except ValueError:
        return SHAPES[-1]
