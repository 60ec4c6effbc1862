"""The probe attached to one vLLM V1 scheduler: samples, the full walk and its tripwires at step boundaries.

Every entry point is called on the EngineCore thread (through :mod:`poolwatch.probe.vllm.hooks`) and
never raises: failures are contained by :class:`~poolwatch.probe.core.containment.Guard`.

* :meth:`Probe.on_step`, before ``Scheduler.schedule``: the previous step is complete.  A sample at
  ``POOLWATCH_PROBE_SAMPLE_INTERVAL``; the full walk every ``POOLWATCH_PROBE_KV_CENSUS_INTERVAL``
  while busy, and at once when a sample's gap is not 0 (so a double free is named by block id before
  the next allocation reaches vLLM's own ``ref_cnt == 0`` assert).
* :meth:`Probe.on_free`, inside the pool's ``free_blocks`` before it runs
  (:mod:`~poolwatch.probe.vllm.free_check`): a block freed at ``ref_cnt`` 0, or listed twice in one
  free, is named at the free -- the count cannot see it (the block stays queued at -1).
* :meth:`Probe.on_idle`, after ``update_from_output``/``finish_requests`` leave no request: a sample
  and, at most every ``idle_kv_census_gap_s``, the full walk (the first idle after work always).

While idle, EngineCore calls no hook at all; :meth:`Probe.refresh_idle` (the endpoint's keepalive
thread, :mod:`~poolwatch.probe.core.serving`) re-stamps the idle snapshot so it does not go stale.

Read-only: nothing here writes to vLLM's objects (no guard in this release of the probe).  The sample
cadence, kill switch, containment and heartbeat are :class:`~poolwatch.probe.core.cadence.Cadence`'s.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from poolwatch.model import Phase, Pool, ProbeHealth, Snapshot, Tripwire, TripwireKind, WorkerId
from poolwatch.probe.core.access import Reading
from poolwatch.probe.core.cadence import Cadence, Clock
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.vllm.free_check import free_findings
from poolwatch.probe.vllm.identity import worker_identity
from poolwatch.probe.vllm.sample import VllmSample, take_sample
from poolwatch.probe.vllm.shapes import VllmShape
from poolwatch.probe.vllm.walks import Walks

__all__ = ["Probe"]

_FREE_KINDS = {"negative_ref": TripwireKind.NEGATIVE_REF, "ref_below_owners": TripwireKind.REF_BELOW_OWNERS}


class Probe(Cadence):
    """One vLLM scheduler's probe (``shape``: the release family, decided before attaching)."""

    def __init__(
        self,
        scheduler: object,
        config: ProbeConfig,
        shape: VllmShape,
        version: str,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Clock = time.monotonic,
        wall: Clock = time.time,
    ) -> None:
        self._lock = threading.Lock()  # the scheduler thread's publishes vs the idle keepalive
        super().__init__(scheduler, config, environ=environ, clock=clock, wall=wall)
        self.shape, self.version = shape, version
        # through the probe: a test or benchmark that swaps the probe's clock swaps the walks' too
        self.walks = Walks(scheduler, shape, config, self.tripwires, clock=self._now, wall=self._wall_now)
        self._identity: WorkerId | None = None
        self._last_hook = clock()

    def _now(self) -> float:
        return self.clock()

    def _wall_now(self) -> float:
        return self.wall()

    @property
    def census(self) -> dict[str, Any] | None:
        """The last walk's detail (``GET /v1/census``)."""
        return self.walks.doc

    def _swap(self, snapshot: Snapshot | None) -> None:
        with self._lock:
            self.publication.publish(snapshot)

    def refresh_idle(self, quiet_s: float = 1.0) -> bool:
        """From the endpoint's keepalive thread: vLLM's EngineCore blocks on its input queue when idle
        and calls no hook, so the idle snapshot is re-stamped (nothing read from vLLM: with no hook
        for ``quiet_s`` nothing touched the pool) instead of going stale at the sidecar.  Only an
        idle snapshot still current is re-stamped; True when it was."""
        with self._lock:
            snap = self.publication.latest
            quiet = self.clock() - self._last_hook >= quiet_s
            if snap is None or snap.phase is not Phase.IDLE or not quiet or self.disabled:
                return False
            self.publication.publish(replace(snap, taken_at=self.wall(), probe=self._health()))
            return True

    # -- entry points (EngineCore thread) -----------------------------------------------------

    def on_step(self, hook: str) -> None:
        self._last_hook = self.clock()
        self.step(lambda: self._sample(hook, idle=False))

    def on_idle(self, hook: str) -> None:
        if self._active() and self.guard.allow():
            self._guarded("idle", lambda: self._sample(hook, idle=True))

    def after_update(self, hook: str) -> None:
        """After ``update_from_output``/``finish_requests``: idle once no request is left."""
        self._last_hook = self.clock()
        requests = getattr(self.scheduler, "requests", None)
        if requests is not None and not requests:
            self.on_idle(hook)

    def on_free(self, blocks: Sequence[Any]) -> None:
        """Inside ``BlockPool.free_blocks``, before it runs: name a double free at the free itself."""
        if self.disabled:
            return
        try:
            found = free_findings(blocks)
            if not found:
                return
            hook = "free_blocks"
            new = self.tripwires.add(
                Tripwire(_FREE_KINDS[kind], Pool.FULL, ids, hook, self.seq) for kind, ids in found.items()
            )
            if new and self.latest is not None:  # mid-step: publish the proof, read no figures
                self._swap(replace(self.latest, tripwires=self.tripwires.all()))
        except Exception as exc:
            self.guard.failed("free", exc)

    def sample_now(self, hook: str = "manual", *, census: bool = False) -> Snapshot | None:
        """A sample regardless of the rate (tests, benchmarks); ``census`` walks the pool as well."""
        if self._active():
            self._guarded("sample", lambda: self._sample(hook, idle=False, walk=census))
        return self.latest

    # -- internals ----------------------------------------------------------------------------

    def _sample(self, hook: str, *, idle: bool, walk: bool = False) -> None:
        started = time.perf_counter()
        reading = Reading()
        sample = take_sample(self.scheduler, self.shape, reading, evictable=self.walks.evictable)
        self._last_sample = self.clock()
        if walk or self.walks.due(sample, idle):
            self.walks.run(sample, hook, self.seq, reading)
            sample = take_sample(self.scheduler, self.shape, reading, evictable=self.walks.evictable)
        elif sample.phase is Phase.BUSY:
            self.walks.busy()
        for label, message in reading.failures.items():
            self.guard.note(label, message)
        self.guard.succeeded()
        self._sample_cost = time.perf_counter() - started - self.walks.unclaimed
        self.walks.unclaimed = 0.0
        self._publish(sample, reading)

    def _worker(self, reading: Reading) -> WorkerId:
        if self._identity is None:
            self._identity = worker_identity(self.scheduler, reading, self.version, self.environ)
        return self._identity

    def _publish(self, sample: VllmSample, reading: Reading) -> None:
        self._swap(
            Snapshot(
                worker=self._worker(reading),
                seq=self.seq,
                taken_at=self.wall(),
                phase=sample.phase,
                pools=sample.pools,
                source="probe",
                queues=sample.queues,
                tripwires=self.tripwires.all(),
                probe=self._health(),
                idle_check_strict=False,  # vLLM has no idle check of its own
                boot_id=self.boot_id,
            )
        )

    def _health(self) -> ProbeHealth:
        return self.guard.health(
            sample_cost=self._sample_cost,
            census_cost=self.walks.cost,
            census_total=self.walks.total,
            disabled=self.switch.off,
            tripwires_dropped=self.tripwires.dropped,
        )

    def _whoami(self) -> WorkerId:
        return self._worker(Reading())
