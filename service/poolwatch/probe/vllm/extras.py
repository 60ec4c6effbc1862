"""What the vLLM room adds to the neutral probe: its step hooks' meaning, the shape check, the
free-time tripwire and the opt-in guard (EngineCore thread).

* :meth:`VllmProbe.on_step`, before ``Scheduler.schedule``: the previous step is complete;
* :meth:`VllmProbe.after_update`, after ``update_from_output``/``finish_requests``: idle once no
  request is left -- an idle sample at once (the endpoint's keepalive re-stamps it while idle);
* :meth:`VllmProbe.on_free`, inside the pool's ``free_blocks`` before it runs (:mod:`~.free_check`):
  a block freed at ``ref_cnt`` 0, listed twice in one free, or left with fewer references than its
  owners is named at the free; one freed below ``ref_cnt`` 0 fails vLLM's assert at its next
  allocation, so the free waits, bounded, until the sidecar has the proof (the last word);
  :meth:`VllmProbe.on_pop`, before a manager pops a request's list, keeps the owners exact;
* a free wrong only in time (armed where its hazard exists, :mod:`~poolwatch.probe.vllm.timing`):
  blocks freed while a step in flight lists them beside a consumer connector, dropped while a draft
  rollback needs them, or freed while a transfer is pending -- named with their request
  (``freed_in_flight``; never a double free; judged on what guard's refusal lets through);
* guard mode (``POOLWATCH_PROBE_GUARD=1``, opt-in; off on an unread release and beside HiSparse):
  the wrong part of a free is refused before vLLM's ``free_blocks`` runs (:mod:`~.refuse`), recorded
  as a ``refuse`` repair, its averted findings settled (PoolwatchProbeRepaired, not DoubleFree);
* at attach (:meth:`VllmProbe.start`): the shape check (:mod:`~.shape_check`; a field missing refuses
  the scheduler), the wraps (:mod:`~.wrapping`) and one idle sample; an unverified release is coarse
  until its first idle walk balances (refused when not), its frees judged once the free path check
  passed (:mod:`~.free_path`), guard off.

Nothing here writes to vLLM's objects (guard hands vLLM's ``free_blocks`` less than it was given).
Cadence, census schedule, containment, snapshot, kill switch and heartbeat are the neutral Probe's.
Kept whole: the hooks are one probe's entry points into one state (tripwires, repairs, publication,
guard); what each judges stands apart already (free_check, refuse, timing, waits, holders).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from poolwatch.model.findings import RepairKind, Tripwire, TripwireKind
from poolwatch.model.rank import Pool
from poolwatch.probe.core.engine import EngineSample, Proof, ReadAsk
from poolwatch.probe.core.probe import Probe
from poolwatch.probe.core.reading import Reading
from poolwatch.probe.core.schedule import Due
from poolwatch.probe.vllm.free_check import free_findings
from poolwatch.probe.vllm.free_path import FREES, FreePath
from poolwatch.probe.vllm.in_flight import InFlight
from poolwatch.probe.vllm.pool_terms import managers, side_owners
from poolwatch.probe.vllm.reader import VllmReader
from poolwatch.probe.vllm.refuse import FreeRefuser, Refusal, refuser_for
from poolwatch.probe.vllm.timing import Timing, arm
from poolwatch.probe.vllm.transfers import Transfers
from poolwatch.probe.vllm.wrapping import Restore, restore, unwrap, wrap_frees, wrap_steps

__all__ = ["VllmProbe"]

log = logging.getLogger("poolwatch.probe")
_FREE_KINDS = {"negative_ref": TripwireKind.NEGATIVE_REF, "ref_below_owners": TripwireKind.REF_BELOW_OWNERS}


class VllmProbe(Probe):
    """One vLLM scheduler's probe."""

    reader: VllmReader
    refuser: FreeRefuser | None = None  # guard mode, where it can be exact (set at start)
    free_path: FreePath = FreePath(True)  # an unverified release's free path check (set at start)
    _mgrs: tuple[Any, ...] = ()  # the single-type managers (fixed once the scheduler is built)
    in_flight: InFlight | None = None  # the steps in flight, where a free can come too early
    transfers: Transfers | None = None  # finished requests' pending transfers, beside a connector
    _timing: Timing | None = None  # the timing checks armed at start
    _steps: tuple[Restore, ...] = ()  # ``schedule`` wrapped to see each step's output
    _marked = False  # the waits noted a step's finishes or preemptions, to clear at the next step

    # -- the hooks (EngineCore thread) -----------------------------------------------------------

    def on_step(self, hook: str) -> None:
        if self._marked and not self.disabled:  # (most steps finish and preempt nothing: no look)
            self._marked = False
            try:  # (contained in line: this runs at every step)
                self.reader.waits.step_begins()
            except Exception as exc:
                self._failed("waits", exc)
        # the sample waits for the step's end (``after_update``), where the requests and lists it
        # reads were just touched by vLLM; here only when that never came for a whole interval more
        self.step(hook, grace_s=self.config.sample_interval_s)

    def _failed(self, where: str, exc: Exception) -> None:
        self.guard.failed(where, exc)
        self._publish_health()

    def after_update(self, hook: str) -> None:
        """After ``update_from_output``/``finish_requests``: idle once no request is left; a sample
        at once when only requests kept for a transfer are left (vLLM up to 0.21 then stops
        stepping: the keepalive keeps that snapshot fresh, its holds aging)."""
        requests = getattr(self.scheduler, "requests", None)
        parked = False
        if not self.disabled:
            try:
                waits = self.reader.waits
                self._marked |= waits.step_ended()
                parked = not self.parked and waits.parked_now(requests)
            except Exception as exc:
                self._failed("waits", exc)
            if self.transfers is not None:
                self.contain("transfers", self.transfers.applied)
        emptied = requests is not None and not requests
        if emptied or parked:
            self.idle(hook, fresh=True)
        else:
            self.settled(hook)

    def on_scheduled(self, output: Any) -> None:
        """After ``schedule``: the tokens it scheduled (the waits' progress, without a request read)."""
        if not self.disabled:  # (the wrap of ``schedule`` contains what cannot raise: a getattr, a sum)
            self.reader.waits.moves.scheduled(output)

    def on_free(self, blocks: list[Any]) -> Sequence[list[Any]] | None:
        """Inside ``BlockPool.free_blocks``, before it runs: name a double free at the free itself;
        in guard mode, refuse its wrong part (the calls to make instead; None: as it came)."""
        if self.disabled:
            return None
        calls = self._judged(blocks)
        if self.in_flight is not None and self.in_flight.kept:  # a refused part never frees
            self._early(blocks if calls is None else [b for part in calls for b in part])
        return calls

    def _judged(self, blocks: list[Any]) -> Sequence[list[Any]] | None:
        try:
            trusted = self.reader.trusted and self.free_path.judges(blocks, self.reader.index)
            index = self.reader.index if trusted else None
            side = side_owners(self.scheduler, self.reader.shape, self._mgrs) if trusted else None
            found = free_findings(blocks, index, self.reader.resync, side)
            if not found:
                return None
            refusal = self.refuser.refuse(blocks, found) if self.refuser is not None else None
        except Exception as exc:
            self.guard.failed("free", exc)
            self._unowned(blocks)
            return None
        if refusal is not None:
            self.contain("refuse", lambda: self._refused(refusal))
            found = refusal.left
        if found:
            self.contain("free", lambda: self._named(found))
        return refusal.calls if refusal is not None and refusal.refused else None

    def _unowned(self, blocks: list[Any]) -> None:
        """The owner count failed: what needs none is still named (``ref_cnt`` 0, a block twice)."""
        found: dict[str, tuple[int, ...]] = {}
        self.contain("free", lambda: found.update(free_findings(blocks)))
        if found:
            self.contain("free", lambda: self._named(found))

    def _named(self, found: dict[str, tuple[int, ...]]) -> None:
        hook = "free_blocks"
        tripwires = (
            Tripwire(_FREE_KINDS[kind], Pool.FULL, ids, hook, self.seq) for kind, ids in found.items()
        )
        if self.tripwires.add(tripwires) and self.latest is not None:  # mid-step: publish the proof
            snap, doomed = replace(self.latest, tripwires=self.tripwires.all()), "negative_ref" in found
            if doomed:  # vLLM's assert fails at the block's next allocation: the proof on disk first
                self.leave_final(snap)
            self._swap(snap)
            if doomed:
                self.last_words()

    def _early(self, blocks: list[Any]) -> None:
        """Blocks this free returns to the pool while a step in flight lists them (their last
        reference goes now: a shared block only loses one); named at once, with their requests."""
        try:
            going = [b for b in blocks if b.ref_cnt <= 1]
            found = self.in_flight.check(going) if self.in_flight is not None else {}
        except Exception as exc:
            self.guard.failed("in_flight", exc)
            return
        if found:
            self.contain("in_flight", lambda: self._named_early(found))

    def _dropped(self, request_id: str, ids: tuple[int, ...]) -> None:
        """Before a windowed manager drops ``ids`` that a rollback of the drafts in flight still needs."""
        if not self.disabled:
            self.contain("in_flight", lambda: self._named_early({request_id: ids}, "remove_skipped_blocks"))

    def _named_early(self, found: dict[str, tuple[int, ...]], hook: str = "free_blocks") -> None:
        ids = tuple(sorted({b for blocks in found.values() for b in blocks}))
        trip = Tripwire(TripwireKind.FREED_IN_FLIGHT, Pool.FULL, ids, hook, self.seq, tuple(found))
        if self.tripwires.add((trip,)) and self.latest is not None:  # mid-step: publish the proof
            self._swap(replace(self.latest, tripwires=self.tripwires.all()))

    def _refused(self, refusal: Refusal) -> None:
        """Guard mode, inside the wrapped free (EngineCore thread): count and log the refusal at
        once (the neutral record, so a call-site capture there sees vLLM's frames above), settle
        what it averted and publish, reading no figures."""
        if not refusal.refused:
            return
        self.repairs.record(
            RepairKind.REFUSE, Pool.FULL, refusal.refused, refusal.requests, "free_blocks", self.seq
        )
        if refusal.settled:  # a finding about a block this refusal left sound (a walk's, before) is over
            self.tripwires.settle(_FREE_KINDS.values(), Pool.FULL, refusal.settled)
        if self.latest is not None:
            self._swap(replace(self.latest, tripwires=self.tripwires.all(), repairs=self.repairs.all()))

    def on_pop(self, index: int, request_id: str, blocks: Any) -> None:
        """A manager pops a request's list to free it (finish, preemption, abort, a deferred free):
        its occurrences stop owning blocks now, before the free looks at them."""
        if self.disabled:
            return
        self.reader.index.released(index, request_id, blocks)
        self.reader.waits.popped(request_id)
        self._marked = True  # (a preemption is cleared at the next step)
        if self.in_flight is not None and self.in_flight.steps:
            self.in_flight.popped(request_id, blocks)
        pending = self.transfers.pending(request_id) if self.transfers is not None else ()
        ids = tuple(b.block_id for b in blocks if not b.is_null) if pending else ()
        if ids:
            self.contain("transfers", lambda: self._named_early({request_id: ids}, "kv_transfer"))

    # -- the extension points --------------------------------------------------------------------

    def start(self) -> None:
        """The shape check, then: wrap the pool's ``free_blocks`` and the managers' pops; a freshly
        built scheduler is idle: sample it now, so the endpoint serves a snapshot before the first
        request (vLLM calls no hook until then, and "no snapshot yet" would read as the target down)."""
        problems = self.reader.shape_problems()
        release = self.release
        if problems:
            shown = "; ".join(problems[:6]) + (f" (+{len(problems) - 6} more)" if len(problems) > 6 else "")
            self.refuse(f"vLLM {release.version or '?'} read as {release.family}: {shown}")
            return
        if not release.verified:
            log.warning(
                "poolwatch probe: vLLM %s is a release poolwatch has not read (a newer one, or a "
                "pre-release, development or local build); reading it as family %s, unverified: its "
                "figures are coarse until the first idle census balances, frees are judged against their "
                "owners once %d in a row were announced by a pop, guard stays off",
                release.version,
                release.family,
                FREES,
            )
        self.free_path = FreePath(release.verified, release.version)
        self._mgrs = managers(self.scheduler, Reading())
        shape, guard = self.reader.shape, self.config.guard
        self.refuser = refuser_for(self.scheduler, self.release, shape, self._mgrs, guard)
        self._wrapped = wrap_frees(self.scheduler, self.on_free, self.on_pop)
        self._steps = tuple(wrap_steps(self.scheduler, self.on_scheduled, None))
        self._timing = arm(self.scheduler, self._mgrs, self.reader.waits.receiving, self._dropped)
        self.in_flight, self.transfers = self._timing.in_flight, self._timing.transfers
        self.idle("attach", fresh=True)

    def close(self) -> None:
        unwrap(getattr(self, "_wrapped", ()))
        if self._timing is not None:
            self._timing.disarm()
        restore(self._steps)
        self.in_flight, self.transfers, self.refuser = None, None, None

    def _health_extras(self) -> dict[str, bool]:
        return {"guard": self.refuser is not None}

    def _after_census(
        self, due: Due, proofs: Sequence[Proof], sample: EngineSample, hook: str
    ) -> ReadAsk | None:
        failed = self.reader.distrusted
        if failed:
            self.refuse(f"vLLM {self.release.version}: the first idle census did not balance ({failed})")
            return None
        return ReadAsk(exact=True) if proofs else None  # the walk's split of the free count
