"""The counter witness on vLLM's block pool (stand-in): ``num_free_blocks`` against the free queue
walked.  A count off from a sound queue is witnessed and the pool judged from the walk (no double
free or leak for it); a queue that holds a block twice is a double free the walk names instead."""

from __future__ import annotations

from tests.helpers import SteppingClock

from poolwatch.conservation import gap
from poolwatch.model.rank import Pool
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.probe import Probe, new_probe
from poolwatch.probe.vllm.engine import VLLM, vllm_release
from rigs.fakes.vllm import Scheduler


def probe_for(sched: Scheduler, version: str = "0.33.0") -> Probe:
    """The vLLM probe on ``sched`` as the engine builds it (worker ``w``), every sample due."""
    config = ProbeConfig(serve=False, sample_interval_s=0.01)
    release, environ = vllm_release(version), {"POOLWATCH_WORKER": "w"}
    return new_probe(VLLM, sched, config, release=release, environ=environ, clock=SteppingClock())


def test_a_free_count_above_a_sound_queue_is_witnessed_and_the_gap_is_the_walks() -> None:
    sched = Scheduler(64)
    probe = probe_for(sched)
    sched.add("a", 3)
    sched.pool.free_block_queue.num_free_blocks += 1  # counted, never queued
    snap = probe.sample_now()  # the raw surplus asks for the walk at once
    assert snap is not None
    [w] = snap.witnesses
    assert (w.pool, w.figure, w.counter) == (
        Pool.FULL,
        "available",
        "block_pool.free_block_queue.num_free_blocks",
    )
    assert w.drift == 1
    assert gap(snap.pools[Pool.FULL]) == 0
    assert snap.tripwires == ()


def test_a_free_count_below_the_queue_is_witnessed_too() -> None:
    sched = Scheduler(64)
    probe = probe_for(sched)
    sched.add("a", 3)
    sched.pool.free_block_queue.num_free_blocks -= 2
    probe.sample_now(census=True)
    snap = probe.latest
    assert snap is not None
    [w] = snap.witnesses
    assert w.drift == -2
    assert gap(snap.pools[Pool.FULL]) == 0


def test_a_block_queued_twice_is_a_double_free_not_a_counter_witness() -> None:
    sched = Scheduler(64)
    probe = probe_for(sched)
    blocks = sched.add("twice", 2)
    sched.finish("twice")
    sched.pool.free_blocks(blocks)  # the same list again: the queue itself holds them twice
    probe.sample_now(census=True)
    snap = probe.latest
    assert snap is not None
    assert snap.witnesses == ()
    assert snap.tripwires
