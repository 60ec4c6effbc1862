"""A vLLM stand-in whose free path changed (issue 42, break 5): a request's blocks are freed first and
its list popped after, by a method the probe's wrappers never see -- what a pre-release or a
development build may do where the releases read pop first.  For ``test_free_path.py`` and the
hostile tier."""

from __future__ import annotations

from poolwatch.probe.core.config import ProbeConfig
from rigs.fakes import vllm as fakes
from rigs.fakes.vllm import Scheduler

__all__ = ["GUARD", "ChangedScheduler", "FullAttentionManager", "changed", "serve"]

GUARD = ProbeConfig(serve=False, sample_interval_s=0.01, directory="/nonexistent-poolwatch-path", guard=True)


class FullAttentionManager(fakes.FullAttentionManager):
    """A changed free path: the request's blocks freed first, its list popped after (a path the
    probe's wrappers never see announced).  Its class name is vLLM's (the probe counts such lists
    by it)."""

    def release_request(self, rid: str) -> None:
        self.block_pool.free_blocks(list(reversed(self.req_to_blocks[rid])))
        del self.req_to_blocks[rid]


class ChangedScheduler(Scheduler):
    def finish(self, rid: str, *, keep_for_transfer: bool = False) -> None:
        self.requests[rid].finished = True
        self.running = [r for r in self.running if r.request_id != rid]
        for m in self.managers:
            m.release_request(rid)  # type: ignore[attr-defined]
        del self.requests[rid]


def changed(n: int = 64) -> ChangedScheduler:
    sched = ChangedScheduler(n)
    pool = sched.pool
    sched.kv_cache_manager.coordinator.single_type_managers = (FullAttentionManager(pool),)
    return sched


def serve(sched: Scheduler, requests: int) -> None:
    """``requests`` requests of 2 blocks each, one after another, each finished and the step over."""
    for n in range(requests):
        sched.schedule()
        sched.add(f"r{n}", 2)
        sched.schedule()
        sched.finish(f"r{n}")
        sched.update_from_output()
