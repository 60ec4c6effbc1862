"""The probe attached to one scheduler: samples, censuses and tripwires at loop boundaries.

Every entry point is called from SGLang's scheduler thread (through :mod:`poolwatch.probe.sglang.hooks`)
and never raises: failures are contained by :class:`~poolwatch.probe.core.containment.Guard`.  Results are
published through :class:`~poolwatch.probe.core.publication.Publication` (``publication.publish``
swaps the ``latest`` reference and wakes long-polls) and one ``census`` reference the HTTP
threads read; the scheduler thread never blocks on I/O except one ``stat`` per second for the
``DISABLE`` file.  While disabled, the probe reads nothing from the scheduler but still publishes
a pool-less heartbeat snapshot (``probe.disabled``) once a second, so the kill switch stays
visible (PoolwatchProbeDegraded can fire) instead of going stale; removing the ``DISABLE`` file
re-enables it (``POST /v1/disable`` is undone only by ``/v1/enable``).

When a census runs and what becomes of its findings is :mod:`poolwatch.probe.sglang.census_schedule`; the
sample cadence, kill switch, containment and the heartbeat published while off are
:class:`~poolwatch.probe.core.cadence.Cadence`'s.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from poolwatch.model import Pool, ProbeHealth, RepairKind, Snapshot, WorkerId
from poolwatch.probe.core.access import Reading
from poolwatch.probe.core.cadence import Cadence, Clock
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.last_word import Outcome, await_collection
from poolwatch.probe.sglang.census_schedule import Censuses
from poolwatch.probe.sglang.final import Suspicion, check_fails, sglang_checks_now, write_final_snapshot
from poolwatch.probe.sglang.identity import sglang_version, worker_identity
from poolwatch.probe.sglang.refuse import FREE_PATHS, FreeRefuser
from poolwatch.probe.sglang.repair import repairer_for
from poolwatch.probe.sglang.shapes import Shape, known_release, shape_or_newest
from poolwatch.probe.sglang.snapshot import Sample, build_snapshot, idle_check_strict, take_sample
from poolwatch.probe.sglang.totals import Memo
from poolwatch.probe.sglang.waiting import WaitingHolders

__all__ = ["Probe"]


class Probe(Cadence):
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
        super().__init__(scheduler, config, environ=environ, clock=clock, wall=wall)
        self.version = config.sglang_version or sglang_version()
        self.shape = shape or shape_or_newest(self.version)
        self.waiting = WaitingHolders()  # the waiting queue's Mamba holders between exact scans
        self._memo = Memo()  # what did not change, kept from one sample to the next
        self._last_exact_waiting = -float("inf")
        self._identity: dict[str, WorkerId] = {}  # by role, read once
        self._strict = idle_check_strict(self.shape, self.environ)
        self.repairer = repairer_for(self.shape, self.version) if config.guard else None  # opt-in guard
        self.censuses = Censuses(
            scheduler, self.shape, config, self.tripwires, self.repairer, self.guard, clock=clock, wall=wall
        )
        self.refuser = self._refuser() if self.repairer is not None else None  # guard v2
        self._idle_seq = -1  # the iteration of the last idle hook
        self._suspicion = Suspicion()
        self.final_cost = 0.0  # seconds the final snapshot's write took (0: none written)
        self.last_word: Outcome | None = None  # how the wait for the sidecar ended (None: no final yet)

    # -- entry points (scheduler thread) -------------------------------------------------------

    @property
    def census(self) -> dict[str, Any] | None:
        """The last census detail (``GET /v1/census``)."""
        return self.censuses.doc

    def on_loop_boundary(self, hook: str) -> None:
        """Start of a scheduler iteration: the previous one is complete (a fresh refusal samples at once)."""
        self.step(lambda: self._sample(hook), self._refused_fresh)

    def on_idle(self, hook: str) -> None:
        """SGLang's idle hook: look first -- always at the first hook after work at which SGLang's
        check really runs (the one that crashes a broken rank; decided as the release decides,
        :func:`~poolwatch.probe.sglang.final.sglang_checks`), else at the sample rate."""
        if not self._sglang_checks_now():
            return self._idle_gated(hook)
        fresh = self._idle_seq < self.seq - 1
        self._idle_seq = self.seq
        due = self._due(self._last_sample, self.config.sample_interval_s)
        if due or (fresh and self._active() and self.guard.allow()):
            self._guarded("idle", lambda: self._sample(hook, idle_check=True))

    def _idle_gated(self, hook: str) -> None:
        """An idle hook at which SGLang's check does not run: only the sample rate applies."""
        if self._due(self._last_sample, self.config.sample_interval_s):
            self._guarded("idle", lambda: self._sample(hook, idle_check=True))

    def _sglang_checks_now(self) -> bool:
        """A cheap look at what gates SGLang's check (``final.sglang_checks_now``)."""
        return sglang_checks_now(self.scheduler, self.shape)

    def after_prefill_chunk(self, hook: str) -> None:
        """Right after ``process_prefill_chunk``: the direct #12994 tripwire (one slot vs the free list)."""
        if self.config.chunk_tripwire and self._active():
            self._guarded("chunk", lambda: self._chunk(hook))

    def sample_now(self, hook: str = "manual") -> Snapshot | None:
        """Take a snapshot regardless of the rate (tests, benchmarks, the emulator)."""
        if self._active():
            self._guarded("sample", lambda: self._sample(hook))
        return self.latest

    # -- internals ----------------------------------------------------------------------------

    def _take(self, reading: Reading, *, idle_check: bool) -> Sample:
        """One sample; the waiting queue is scanned exactly at SGLang's idle hook and at least
        once per Mamba census interval (and whenever recalling it leaves a gap, see snapshot)."""
        now = self.clock()
        interval = self.config.census_interval_s
        exact = idle_check or now - min(self._last_exact_waiting, self.censuses.last_mamba) >= interval
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
        guard = self.repairer is not None
        force = self._suspicion.due(sample, self.shape, idle_check=idle_check, guard=guard)
        censused = self.censuses.mamba_runs
        found = self.censuses.maybe(sample, reading, hook, self.seq, force=force)
        if self.refuser is not None and self.censuses.mamba_runs != censused:
            self.refuser.refresh()  # the tree proof's index, taken where the Mamba census looked
        if self.censuses.repair(found, sample.pools, sample.phase, hook, self.seq):
            reading = Reading()  # the repaired figures are the ones to publish (and to judge)
            sample = self._take(reading, idle_check=True)
        for label, message in reading.failures.items():
            self.guard.note(label, message)
        self.guard.succeeded()
        self._sample_cost = time.perf_counter() - started
        self._publish(sample, reading, final=idle_check and self._strict and check_fails(sample, self.shape))

    def _chunk(self, hook: str) -> None:
        if self.censuses.chunk(hook, self.seq) or self._refused_fresh():
            self._guarded("sample", lambda: self._sample(hook))  # publish the proof (or repair) at once

    def _refuser(self) -> FreeRefuser | None:
        """Guard v2 on the release families whose free paths were read (``refuse``'s table); off on a
        release newer than the newest read, as "return" is."""
        paths = FREE_PATHS.get(self.shape.family) if known_release(self.version) else None
        refuser = FreeRefuser(self.scheduler, self._refused, lambda: self.disabled, paths) if paths else None
        return refuser if refuser is not None and refuser.install() else None

    def _refused(self, slots: tuple[int, ...], requests: tuple[str, ...], where: str) -> None:
        """Called from inside the wrapped ``free`` (scheduler thread): count and log at once."""
        if self.repairer is not None:
            self.repairer.record(RepairKind.REFUSE, Pool.MAMBA, slots, requests, where, self.seq)

    def _refused_fresh(self) -> bool:
        """A refusal not yet published (then the next hook publishes at once)."""
        if self.refuser is None or not self.refuser.fresh or not self._active():
            return False
        self.refuser.fresh = False
        return True

    def close(self) -> None:
        """Give the pool its own ``free`` back (detach)."""
        if self.refuser is not None:
            self.refuser.uninstall()
            self.refuser = None

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
                secret = getattr(self.publisher, "secret", None)
                self.final_cost = write_final_snapshot(self.config.directory, snap, secret)
            except OSError as exc:
                self.guard.note("final", f"{type(exc).__name__}: {exc}")
        self.latest = snap
        if final:  # the rank dies next anyway: let the sidecar collect it first (bounded)
            self.last_word = self._await_collection(snap.seq)

    def _await_collection(self, seq: int) -> Outcome:
        """Wait until the sidecar was handed snapshot ``seq`` (``core.last_word``); none when serving off."""
        serving = self.config.serve and self.publisher is not None
        return await_collection(self.publication if serving else None, seq, self.config.last_word_wait_s)

    def _health(self) -> ProbeHealth:
        return self.guard.health(
            sample_cost=self._sample_cost,
            census_cost=self.censuses.cost,
            census_total=self.censuses.total,
            disabled=self.switch.off,
            tripwires_dropped=self.tripwires.dropped,
            guard=self.repairer is not None,
            guard_return=self.repairer is not None and self.repairer.allow_return,
        )

    def _whoami(self) -> WorkerId:
        return worker_identity(self.scheduler, Reading(), "", self.version, self.environ)
