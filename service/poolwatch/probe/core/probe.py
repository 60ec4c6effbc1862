"""The probe of one scheduler rank, for every engine: when to sample and census, and what to publish.

An engine room supplies a :class:`~poolwatch.probe.core.engine.Engine` spec and, through it, a
:class:`~poolwatch.probe.core.engine.Reader` for this scheduler; this class does the rest once:

* :meth:`Probe.step`, at each step boundary (the previous iteration is complete): the iteration
  count advances and, once ``sample_interval_s`` has passed (or the room asks for one at once), a
  sample is taken;
* :meth:`Probe.idle`, at an engine's idle hook: a sample when the interval has passed, or at once
  when the room says this is the first idle hook after work (``fresh``);
* a sample (:meth:`Probe._sample`): read -> the census schedule (:mod:`~poolwatch.probe.core.schedule`)
  -> the censuses due and their findings (tripwires, ``GET /v1/census``, the engine counters they
  disagree with: :mod:`~poolwatch.probe.core.counters`) -> the figures judged from the census ->
  contain every failure -> publish one snapshot (:mod:`~poolwatch.probe.core.stamping`:
  ``publication.publish`` swaps a reference and wakes the long-polls);
* while the probe is off (``POST /v1/disable``, the ``DISABLE`` file, or its containment gave up)
  nothing is read from the engine, but a pool-less heartbeat snapshot is published once a second so
  the kill switch stays visible (:mod:`poolwatch.probe.core.kill_switch`);
* an engine whose scheduler calls no hook while idle (``Engine.keepalive``) has its idle snapshot
  re-stamped from the endpoint's keepalive thread (:meth:`Probe.refresh_idle`).

What a room adds (SGLang's last word and guard, vLLM's free-time tripwire) is a subclass that
overrides the few methods marked as extension points.  Everything here runs on the engine's
scheduler thread (the keepalive aside) and never raises into it: a failure is contained by
:class:`~poolwatch.probe.core.containment.Guard` and shows in the probe's health.

Kept whole: the skeleton every engine's probe shares -- entry points, the sample, the censuses, the
extension points -- is the one class a room subclasses (what it publishes is ``stamping.py``).
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from poolwatch.engines import load
from poolwatch.model.rank import Phase
from poolwatch.model.snapshot import Snapshot
from poolwatch.probe.census.report import census_envelope
from poolwatch.probe.core.call_site import CallSites
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.containment import Guard
from poolwatch.probe.core.counters import CounterBook, readings_of
from poolwatch.probe.core.engine import Engine, EngineSample, Proof, ReadAsk, Reader, Release
from poolwatch.probe.core.kill_switch import KillSwitch
from poolwatch.probe.core.last_word import Outcome
from poolwatch.probe.core.pacing import SamplePacer
from poolwatch.probe.core.publication import Publication
from poolwatch.probe.core.rank_identity import RankIdentity
from poolwatch.probe.core.reading import Reading
from poolwatch.probe.core.repairs import RepairLog
from poolwatch.probe.core.schedule import CensusSchedule, Due
from poolwatch.probe.core.stamping import Stamping
from poolwatch.probe.core.tripwires import TripwireLog
from poolwatch.probe.core.waiting import WaitBook, Waits, merged

__all__ = ["Clock", "Probe", "new_probe"]

Clock = Callable[[], float]
QUIET_S = 1.0  # a keepalive re-stamps an idle snapshot only after this long without a hook


class Probe(Stamping):
    """One scheduler rank's probe (a room subclasses it only for what is truly extra); what it
    publishes, and how, is :class:`~poolwatch.probe.core.stamping.Stamping`'s."""

    def __init__(
        self,
        engine: Engine,
        scheduler: object,
        config: ProbeConfig,
        *,
        release: Release | None = None,
        environ: Mapping[str, str] | None = None,
        clock: Clock = time.monotonic,
        wall: Clock = time.time,
    ) -> None:
        self.engine, self.scheduler, self.config = engine, scheduler, config
        self.environ: Mapping[str, str] = dict(os.environ if environ is None else environ)
        self.release = release or engine.release(config.release)
        self.clock, self.wall = clock, wall
        self.boot_id = uuid.uuid4().hex[:16]
        self.started_at = wall()
        self.guard = Guard(config.max_consecutive_errors)
        self.call_sites = CallSites(engine.code_package)  # the engine's frames of a finding
        self.tripwires = TripwireLog(sites=self.call_sites)
        self.repairs = RepairLog(self.call_sites)  # what guard did (a room's guard records into it)
        self.counters = CounterBook()  # the engine counters the censuses found off (the counter witness)
        self.seq = 0
        self.publication = Publication()
        self.switch = KillSwitch(config.directory)
        # off: the kill switch or the guard's give-up, kept as one attribute (every hook asks it first,
        # right after the GPU wait, where each object a hook touches costs its first touch)
        self.disabled = False
        self.guard.changed = self.switch.changed = self._recheck_off
        self.publisher: Any = None  # set by lifecycle.attach when serving
        self.last_word: Outcome | None = None  # how the last wait for the sidecar ended (None: none)
        self.reader: Reader = engine.open(scheduler, config, self.release, self.environ)
        self.identity = RankIdentity(
            engine.name, self.release, self.reader, worker=config.worker, environ=self.environ
        )
        rules = ((c.name, c.rule(config), c.pools) for c in self.reader.censuses)
        self.schedule = CensusSchedule(rules)
        self.census: dict[str, Any] | None = None  # the last census detail (``GET /v1/census``)
        self.census_cost = 0.0  # seconds the last census took
        self.census_total = 0
        self._lock = threading.Lock()  # the scheduler thread's publishes vs the idle keepalive
        self._last_sample = -float("inf")  # any sample's clock (the idle cadence)
        self._busy_at = -float("inf")  # when the next busy sample is due (the last busy one + the pace)
        self._last_hook = clock()
        self._idle_seq = -1  # the iteration of the last idle hook
        self._sample_cost = 0.0
        self.pacer = SamplePacer(config.sample_interval_s, config.sample_budget)
        self.waits = WaitBook()  # holds' ages, progress counters and the stall, across samples
        self.parked = False  # the last sample found nothing to step but owners waiting (keepalive)

    # -- entry points (scheduler thread) ------------------------------------------------------

    def step(self, hook: str, now: Callable[[], bool] | None = None, *, grace_s: float = 0.0) -> None:
        """A step boundary: the previous iteration is complete.  A sample when the interval has
        passed or ``now()`` says so (asked only when the interval has not); ``grace_s``: a due
        sample is left this much longer to a later point of the same step (:meth:`settled`)."""
        self.seq += 1
        at = self._last_hook = self.clock()
        if (at >= self._busy_at + grace_s and self._ready()) or (now is not None and now()):
            self.contain("sample", lambda: self._sample(hook))
        elif self.disabled and self.switch.heartbeat_due(self.clock()):
            self.contain("heartbeat", self._heartbeat)

    def settled(self, hook: str) -> None:
        """A later point of a step than :meth:`step` (its results applied, what a sample reads just
        touched by the engine, so still in the CPU's caches): the sample due, if any."""
        at = self._last_hook = self.clock()
        if at >= self._busy_at and self._ready():  # (the busy clock first: a step's hooks touch little)
            self.contain("sample", lambda: self._sample(hook))

    def idle(self, hook: str, *, fresh: bool | None = None, idle_hook: bool = True) -> None:
        """An idle hook: a sample when the interval has passed, or at once when ``fresh`` (the first
        idle hook after work: where an engine's own idle check looks).  By default an engine calls
        its idle hook at every idle iteration, and the first after a busy one is fresh."""
        self._last_hook = self.clock()
        if fresh is None:
            fresh = self._idle_seq < self.seq - 1
            self._idle_seq = self.seq
        if self._due() or (fresh and self._ready()):
            self.contain("idle", lambda: self._sample(hook, idle_hook=idle_hook))

    def sample_now(self, hook: str = "manual", *, census: bool = False) -> Snapshot | None:
        """A sample regardless of the rate (tests, benchmarks, the emulator); ``census`` runs every
        census as well."""
        if self._active():
            self.contain("sample", lambda: self._sample(hook, census=census))
        return self.latest

    def refresh_idle(self, quiet_s: float = QUIET_S) -> bool:
        """From the endpoint's keepalive thread (``Engine.keepalive``): re-stamp the idle snapshot
        when no hook ran for ``quiet_s`` (nothing read from the engine: with no hook, nothing
        touched the pool).  Only an idle snapshot still current is re-stamped, or a parked one (nothing
        to step, only owners waiting on a transfer: their holds age as it is re-stamped); True when it
        was."""
        with self._lock:
            snap = self.publication.latest
            quiet = self.clock() - self._last_hook >= quiet_s
            if snap is None or not (snap.phase is Phase.IDLE or self.parked) or not quiet or self.disabled:
                return False
            self.publication.publish(replace(snap, taken_at=self.wall(), probe=self._health()))
            return True

    # -- the kill switch -------------------------------------------------------------------------

    def disable(self) -> None:
        self.switch.runtime = True
        self._recheck_off()
        self._publish_health()

    def enable(self) -> None:
        self.switch.runtime = False
        self._recheck_off()

    def _recheck_off(self) -> None:
        self.disabled = self.switch.off or self.guard.gave_up

    def _active(self) -> bool:
        self.switch.look(self.clock())
        return not self.disabled

    def _due(self) -> bool:
        """The interval has passed since the last sample, idle or not (the idle cadence).  The busy
        cadence (:meth:`step`, :meth:`settled`) counts from the last busy sample instead
        (``_busy_at``): the first idle sample after work is taken at once and does not restart it,
        or bursts of work shorter than the paced interval would only ever be sampled idle."""
        return self.clock() - self._last_sample >= self.pacer.current_s and self._ready()

    def _ready(self) -> bool:
        return self._active() and self.guard.allow()

    def refuse(self, reason: str) -> None:
        """Stop reading this scheduler for good (the room found it cannot be read safely): a
        pool-less heartbeat keeps saying so, with the reason, instead of going silent."""
        self.guard.refuse(reason)
        self._publish_health()

    def contain(self, where: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as exc:
            self.guard.failed(where, exc)
            self._publish_health()

    # -- the sample --------------------------------------------------------------------------------

    def _sample(self, hook: str, *, idle_hook: bool = False, census: bool = False) -> None:
        started = time.perf_counter()
        now = self.clock()
        reading = Reading()
        due_now = self.schedule.by_clock(now, idle=self.schedule.was_idle)
        sample = self.reader.read(reading, ReadAsk(exact=idle_hook or bool(due_now), due=due_now))
        waits = sample.waits
        self._last_sample = now
        if not idle_hook:  # (set before the rest: a sample that fails still waits its interval)
            self._busy_at = now + self.pacer.current_s
        idle = sample.phase is Phase.IDLE
        force = census or self._force(sample, idle_hook) or self.counters.suspect(sample.pools)
        judged = self.counters.judged(sample.pools)
        due = self.schedule.due(now, judged, idle=idle, force=force)
        census_cost = 0.0
        if due:
            proofs = self._census(due, sample, reading, hook)
            census_cost = self.census_cost
            again = self._after_census(due, proofs, sample, hook)
            if self.disabled:  # the room refused this scheduler: say so, publish nothing read
                self._heartbeat()
                return
            if again is not None:  # the census changed what a read would find: read once more
                reading = Reading()
                sample = self.reader.read(reading, again)
                waits = merged(waits, sample.waits)
        for label, message in reading.failures.items():
            self.guard.note(label, message)
        self.guard.succeeded()
        self._waited(waits)
        if due:  # a census measured the counters (and may have read again): judge them anew
            judged = self.counters.judged(sample.pools)
        sample = replace(sample, pools=judged)  # the census's figures
        self._sample_cost = time.perf_counter() - started - census_cost
        if not idle_hook:
            self.pacer.record(self._sample_cost)
            self._busy_at = now + self.pacer.current_s  # the configured interval, paced to this cost too
        self._deliver(sample, reading, hook, idle_hook=idle_hook)
        if due:  # the census budget spaces the next gap walk by all this walk cost the thread: the
            # census, the read it asked for again and the proofs delivered (the census alone was
            # half of it on vLLM, and a growing leak walked twice as often as the budget allows)
            self.schedule.pass_cost = time.perf_counter() - started

    def _waited(self, waits: Waits | None) -> None:
        """The holds and progress the next snapshot carries, from what the room read (once per sample)."""
        if waits is None:
            self.holds, self.progress, self.parked = (), None, False
            return
        now = self.wall()
        self.holds = self.waits.holds(waits, now)
        self.progress = None if waits.moves is None else self.waits.progress(waits.moves, self.seq, now)
        self.parked = waits.parked

    def _census(self, due: Due, sample: EngineSample, reading: Reading, hook: str) -> list[Proof]:
        """Run the censuses ``due`` names, in the room's order; their findings become tripwires."""
        started = time.perf_counter()
        idle = sample.phase is Phase.IDLE
        proofs: list[Proof] = []
        for census in self.reader.censuses:
            if census.name in due.names:
                self.schedule.ran(census.name, self.clock())
                proofs += census.run(sample, reading, idle=idle, lost=due.lost)
        for proof in proofs:
            self.tripwires.add(proof.tripwires(hook, self.seq))
            self.counters.measured(readings_of(proof), self.seq, self.wall())
        self.census_total += 1
        self.census_cost = self.schedule.pass_cost = time.perf_counter() - started
        self.census = census_envelope(
            [p.body() for p in proofs],
            seq=self.seq,
            hook=hook,
            taken_at=self.wall(),
            cost=self.census_cost,
            phase=sample.phase,
        )
        return proofs

    # -- extension points (a room's subclass) -----------------------------------------------------

    def start(self) -> None:
        """Attached (and serving, when it serves): the room's own set-up (a free wrapped, a first look)."""

    def close(self) -> None:
        """Detached: undo what :meth:`start` or the room's extras did."""

    def _force(self, sample: EngineSample, idle_hook: bool) -> bool:
        """Whether to census everything now (a room's suspicion)."""
        return False

    def _after_census(
        self, due: Due, proofs: Sequence[Proof], sample: EngineSample, hook: str
    ) -> ReadAsk | None:
        """After the censuses: the ask of a second read when what they did changes the figures."""
        return None

    def _deliver(self, sample: EngineSample, reading: Reading, hook: str, *, idle_hook: bool) -> None:
        """Publish the sample's snapshot (a room may add to it, or act after it)."""
        self._swap(self._snapshot(sample, reading))


def new_probe(engine: Engine, scheduler: object, config: ProbeConfig, **keywords: Any) -> Probe:
    """A probe of ``engine`` on ``scheduler`` (not attached: see ``lifecycle.attach``): the room's
    subclass named by ``Engine.probe`` (imported now), else the neutral :class:`Probe`."""
    cls = load(engine.probe) if engine.probe else Probe
    if not (isinstance(cls, type) and issubclass(cls, Probe)):
        raise TypeError(f"{engine.name}: Engine.probe {engine.probe!r} is not a Probe subclass")
    return cls(engine, scheduler, config, **keywords)
