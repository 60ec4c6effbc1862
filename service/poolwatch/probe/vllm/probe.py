"""What the vLLM room adds to the neutral probe: its step hooks' meaning and the free-time tripwire
(EngineCore thread).

* :meth:`VllmProbe.on_step`, before ``Scheduler.schedule``: the previous step is complete;
* :meth:`VllmProbe.after_update`, after ``update_from_output``/``finish_requests``: once no request
  is left the scheduler is idle -- an idle sample at once (vLLM calls it once per transition to
  idle, then no hook at all while idle: the endpoint's keepalive re-stamps the idle snapshot);
* :meth:`VllmProbe.on_free`, inside the pool's ``free_blocks`` before it runs
  (:mod:`~poolwatch.probe.vllm.free_check`): a block freed at ``ref_cnt`` 0, or listed twice in one
  free, is named at the free -- the count cannot see it (the block stays queued at -1);
* at attach, the pool *instance*'s ``free_blocks`` is wrapped and one idle sample is taken, so the
  endpoint serves a snapshot before the first request.

Read-only: nothing here writes to vLLM's objects.  The sample cadence, the census schedule (the
walk), containment, the snapshot, kill switch and heartbeat are the neutral
:class:`~poolwatch.probe.core.probe.Probe`'s.
"""

from __future__ import annotations

import functools
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

    # -- the extension points --------------------------------------------------------------------

    def start(self) -> None:
        """Wrap the pool's ``free_blocks``; a freshly built scheduler is idle: sample it now, so the
        endpoint serves a snapshot before the first request (vLLM calls no hook until then, and "no
        snapshot yet" would read as the target down)."""
        self._wrap_free()
        self.idle("attach", fresh=True)

    def close(self) -> None:
        pool = self._pool()
        if pool is not None and "free_blocks" in vars(pool):
            del pool.free_blocks

    def _after_census(
        self, due: Due, proofs: Sequence[Proof], sample: EngineSample, hook: str
    ) -> ReadAsk | None:
        return ReadAsk(exact=True) if proofs else None  # the walk's split of the free count

    def _pool(self) -> Any:
        return getattr(getattr(self.scheduler, "kv_cache_manager", None), "block_pool", None)

    def _wrap_free(self) -> None:
        """The pool instance's ``free_blocks``: the probe looks at the list, then vLLM frees it."""
        pool = self._pool()
        original = getattr(pool, "free_blocks", None)
        if pool is None or original is None or "free_blocks" in vars(pool):
            return
        look = self.on_free

        @functools.wraps(original)
        def free_blocks(ordered_blocks: Any, *args: Any, **kwargs: Any) -> Any:
            blocks = list(ordered_blocks)  # an iterator would be spent by the look
            try:
                look(blocks)
            except Exception:
                log.debug("poolwatch free tripwire failed", exc_info=True)
            return original(blocks, *args, **kwargs)

        pool.free_blocks = free_blocks
