"""What the SGLang room adds to the neutral probe: the idle check's gating, the #12994 chunk tripwire,
the final snapshot and its last word, and the opt-in guard (scheduler thread).

* :meth:`SglangProbe.on_idle` looks before SGLang's own idle check -- always at the first hook after
  work at which that check really runs (the one that crashes a broken rank; decided as the release
  decides, :func:`~poolwatch.probe.sglang.final.sglang_checks_now`), else at the sample rate;
* :meth:`SglangProbe.after_prefill_chunk`: is the chunked request's Mamba slot on the free list?
  (:func:`~poolwatch.probe.sglang.tripwires.chunk_tripwires`; new findings publish at once); without
  guard, a first finding arms a one-shot witness on the Mamba free paths, which names the line of
  SGLang that makes the next identical wrong free (:mod:`~poolwatch.probe.sglang.witness`);
* when SGLang's strict idle check is certain to raise at this hook, the snapshot is *final*: written
  into the discovery directory before the process is gone, and the rank waits (bounded) until its
  sidecar has collected it (:mod:`poolwatch.probe.core.last_word`);
* guard mode (``POOLWATCH_PROBE_GUARD=1``): the censuses' proofs are acted on
  (:class:`~poolwatch.probe.sglang.repair.Repairer`) and the wrong frees of the families whose free
  paths were read are refused before they run (:class:`~poolwatch.probe.sglang.guard.refuser.FreeRefuser`).

Everything else -- the sample cadence, the census schedule, containment, the snapshot, the kill
switch and heartbeat -- is :class:`~poolwatch.probe.core.probe.Probe`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from poolwatch.model.findings import CallSite, RepairKind, TripwireKind
from poolwatch.model.rank import Phase, Pool, PoolAccount
from poolwatch.probe.census.proofs import PoolCensus
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.engine import Engine, EngineSample, Proof, ReadAsk
from poolwatch.probe.core.probe import Probe
from poolwatch.probe.core.reading import Reading
from poolwatch.probe.core.schedule import Due
from poolwatch.probe.core.witness import FreeWitness
from poolwatch.probe.sglang.final import Suspicion, check_fails, sglang_checks_now
from poolwatch.probe.sglang.guard.paths import GUARD_PATHS
from poolwatch.probe.sglang.guard.refuser import FreeRefuser
from poolwatch.probe.sglang.reader import SglangReader
from poolwatch.probe.sglang.repair import census_of, repairer_for
from poolwatch.probe.sglang.shapes import Shape
from poolwatch.probe.sglang.snapshot import Sample
from poolwatch.probe.sglang.tripwires import chunk_tripwires
from poolwatch.probe.sglang.witness import arm_mamba_witness

__all__ = ["SglangProbe"]

_CHUNK_KINDS = (TripwireKind.FREE_AND_LIVE, TripwireKind.FREE_DUPLICATE)  # what the chunk tripwire finds


class SglangProbe(Probe):
    """One SGLang scheduler rank's probe."""

    reader: SglangReader

    def __init__(self, engine: Engine, scheduler: object, config: ProbeConfig, **keywords: Any) -> None:
        super().__init__(engine, scheduler, config, **keywords)
        self._unpublished = False  # guard refused a free the snapshots do not show yet
        self.repairer = repairer_for(self.shape, self.release.version, self.repairs) if config.guard else None
        self.refuser = self._refuser() if self.repairer is not None else None  # guard v2
        self._suspicion = Suspicion()
        self._has_mamba = True  # until a sample shows the model has no Mamba pool
        self.witness = FreeWitness(self.call_sites, self._witnessed, lambda: self.seq)

    @property
    def shape(self) -> Shape:
        return self.reader.shape

    # -- the hooks (scheduler thread) ----------------------------------------------------------

    def on_loop_boundary(self, hook: str) -> None:
        """Start of a scheduler iteration: the previous one is complete (a fresh refusal samples at once;
        asked only while guard's refuser holds one, so most steps make no call for it)."""
        self.step(hook, self._refused_fresh if self._unpublished else None)

    def on_idle(self, hook: str) -> None:
        """SGLang's idle hook: fresh at the first one after work, but only where SGLang's check runs."""
        if sglang_checks_now(self.scheduler, self.shape):
            self.idle(hook)
        else:
            self.idle(hook, fresh=False)

    def after_prefill_chunk(self, hook: str) -> None:
        """Right after ``process_prefill_chunk``: the direct #12994 tripwire (one slot vs the free list)."""
        if self.config.chunk_tripwire and self._has_mamba and self._active():
            self.contain("chunk", lambda: self._chunk(hook))

    def _chunk(self, hook: str) -> None:
        reading = Reading()
        found = chunk_tripwires(self.scheduler, self.shape, reading, self.seq, hook)
        for label, message in reading.failures.items():
            self.guard.note(label, message)
        new = bool(found) and self.tripwires.add(found)
        if new:  # logged and (guard mode) quarantined before the next allocation can hand it out
            self._repair(census_of(found), {}, Phase.BUSY, hook)
            if self.refuser is None:  # the free had returned: catch the line that makes the next one
                arm_mamba_witness(self.witness, self.scheduler, self.shape.family)
        if new or self._refused_fresh():
            self.contain("sample", lambda: self._sample(hook))  # publish the proof (or repair) at once

    # -- the extension points --------------------------------------------------------------------

    def _force(self, sample: EngineSample, idle_hook: bool) -> bool:
        guard = self.repairer is not None
        return self._suspicion.due(sample.detail, self.shape, idle_check=idle_hook, guard=guard)

    def _after_census(
        self, due: Due, proofs: Sequence[Proof], sample: EngineSample, hook: str
    ) -> ReadAsk | None:
        if self.refuser is not None and "mamba" in due.names:
            self.refuser.refresh()  # the tree proof's index, taken where the Mamba census looked
        found = [p for p in proofs if isinstance(p, PoolCensus)]
        if self._repair(found, sample.pools, sample.phase, hook):
            return ReadAsk(exact=True)  # the repaired figures are the ones to publish (and to judge)
        return None

    def _repair(
        self, found: list[PoolCensus], pools: dict[Pool, PoolAccount], phase: Phase, hook: str
    ) -> bool:
        """Guard mode: act on what the censuses prove (settling those findings); True if a free list
        changed.  A lost slot is returned only with the pool's exact gap at full idle."""
        if self.repairer is None:
            return False
        settled = self.repairer.act_all(self.scheduler, found, pools, phase, hook, self.seq)
        for kinds, pool, slots in settled:
            self.tripwires.settle(kinds, pool, slots)
        return bool(settled)

    def _deliver(self, sample: EngineSample, reading: Reading, hook: str, *, idle_hook: bool) -> None:
        detail: Sample = sample.detail
        self._has_mamba = Pool.MAMBA in sample.pools
        strict = bool(self.reader.idle_check_strict)
        final = idle_hook and strict and check_fails(detail, self.shape)
        snap = self._snapshot(sample, reading)
        if final:
            snap = replace(snap, final=final)
        if final:  # SGLang raises next: the file must exist before the process is gone
            self.leave_final(snap)
        self._swap(snap)
        if final:  # the rank dies next anyway: let the sidecar collect it first (bounded)
            self.last_words()

    def _health_extras(self) -> dict[str, bool]:
        guard = self.repairer is not None
        return {
            "guard": guard,
            "guard_return": guard and self.repairer is not None and self.repairer.allow_return,
        }

    # -- guard v2: refusing a wrong free before it runs -------------------------------------------

    def _refuser(self) -> FreeRefuser | None:
        """Guard v2 on the release families whose free paths were read (``guard.paths``' table); off
        on an unverified release, as "return" is."""
        paths = GUARD_PATHS.get(self.shape.family) if self.release.verified else None
        refuser = FreeRefuser(self.scheduler, self._refused, lambda: self.disabled, paths) if paths else None
        return refuser if refuser is not None and refuser.install() else None

    def _refused(
        self, pool: Pool, slots: tuple[int, ...], requests: tuple[str, ...], where: str, page: int
    ) -> None:
        """Called from inside the wrapped free (scheduler thread): count and log at once; the next
        hook publishes it."""
        self._unpublished = True
        self.repairs.record(RepairKind.REFUSE, pool, slots, requests, where, self.seq, page=page)

    def _witnessed(self, site: CallSite) -> None:
        """The witness caught the chunk's wrong free again (scheduler thread, inside the free)."""
        self.tripwires.witness(Pool.MAMBA, _CHUNK_KINDS, site)

    def _refused_fresh(self) -> bool:
        """A refusal not yet published (then the next hook publishes at once)."""
        if not self._unpublished or not self._active():
            return False
        self._unpublished = False
        return True

    def close(self) -> None:
        """Give the pool its own ``free`` back (detach)."""
        self.witness.disarm()
        if self.refuser is not None:
            self.refuser.uninstall()
            self.refuser = None
