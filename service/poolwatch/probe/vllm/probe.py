"""What the vLLM room adds to the neutral probe: its step hooks' meaning, the shape check, the
free-time tripwire (EngineCore thread).

* :meth:`VllmProbe.on_step`, before ``Scheduler.schedule``: the previous step is complete;
* :meth:`VllmProbe.after_update`, after ``update_from_output``/``finish_requests``: once no request
  is left the scheduler is idle -- an idle sample at once (vLLM calls it once per transition to
  idle, then no hook at all while idle: the endpoint's keepalive re-stamps the idle snapshot);
* :meth:`VllmProbe.on_free`, inside the pool's ``free_blocks`` before it runs
  (:mod:`~poolwatch.probe.vllm.free_check`): a block freed at ``ref_cnt`` 0, listed twice in one
  free, or left with fewer references than the lists that still name it (a shared prefix freed
  twice, a premature free) is named at the free, before it can be handed to another request;
  :meth:`VllmProbe.on_pop`, before a manager pops a request's list, keeps the owners exact;
* at attach (:meth:`VllmProbe.start`), the shape check (:mod:`~poolwatch.probe.vllm.shape_check`):
  a field missing or changed refuses the scheduler, visibly; then the pool's ``free_blocks`` and the
  managers' pops are wrapped (:mod:`~poolwatch.probe.vllm.wrapping`) and one idle sample is taken;
* an unverified release (one whose wheel was never read) is coarse until its first idle walk
  balances, and refused when it does not.

Read-only: nothing here writes to vLLM's objects.  The sample cadence, the census schedule (the
walk), containment, the snapshot, kill switch and heartbeat are the neutral
:class:`~poolwatch.probe.core.probe.Probe`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from poolwatch.model import Pool, Tripwire, TripwireKind
from poolwatch.probe.core.engine import EngineSample, Proof, ReadAsk
from poolwatch.probe.core.probe import Probe
from poolwatch.probe.core.schedule import Due
from poolwatch.probe.vllm.free_check import free_findings
from poolwatch.probe.vllm.reader import VllmReader
from poolwatch.probe.vllm.wrapping import unwrap, wrap_frees

__all__ = ["VllmProbe"]

log = logging.getLogger("poolwatch.probe")
_FREE_KINDS = {"negative_ref": TripwireKind.NEGATIVE_REF, "ref_below_owners": TripwireKind.REF_BELOW_OWNERS}


class VllmProbe(Probe):
    """One vLLM scheduler's probe."""

    reader: VllmReader

    # -- the hooks (EngineCore thread) -----------------------------------------------------------

    def on_step(self, hook: str) -> None:
        self.step(hook)

    def after_update(self, hook: str) -> None:
        """After ``update_from_output``/``finish_requests``: idle once no request is left."""
        requests = getattr(self.scheduler, "requests", None)
        if requests is not None and not requests:
            self.idle(hook, fresh=True)
        else:
            self._last_hook = self.clock()

    def on_free(self, blocks: Sequence[Any]) -> None:
        """Inside ``BlockPool.free_blocks``, before it runs: name a double free at the free itself."""
        if self.disabled:
            return
        try:
            index = self.reader.index if self.reader.trusted else None
            found = free_findings(blocks, index, self.reader.resync)
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

    def on_pop(self, index: int, request_id: str, blocks: Any) -> None:
        """A manager pops a request's list to free it (finish, preemption, abort, a deferred free):
        its occurrences stop owning blocks now, before the free looks at them."""
        if not self.disabled:
            self.reader.index.released(index, request_id, blocks)

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
                "poolwatch probe: vLLM %s is a release poolwatch has not read; reading it as family %s, "
                "unverified: its figures are coarse until the first idle census balances, guard stays off",
                release.version,
                release.family,
            )
        self._wrapped = wrap_frees(self.scheduler, self.on_free, self.on_pop)
        self.idle("attach", fresh=True)

    def close(self) -> None:
        unwrap(getattr(self, "_wrapped", ()))

    def _after_census(
        self, due: Due, proofs: Sequence[Proof], sample: EngineSample, hook: str
    ) -> ReadAsk | None:
        failed = self.reader.distrusted
        if failed:
            self.refuse(f"vLLM {self.release.version}: the first idle census did not balance ({failed})")
            return None
        return ReadAsk(exact=True) if proofs else None  # the walk's split of the free count
