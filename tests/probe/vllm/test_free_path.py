"""A pre-release, development or local build is unverified, and its frees are judged against their
owners only once it is seen announcing them (issue 42, break 5).

Before: ``0.34.0rc1`` was read as 0.34.0, verified; on a stand-in whose free path changed (the free
made before the pop) guard refused every healthy free: 63 of 63 blocks leaked, and allocation failed
at the seventh request.  Without guard, every healthy free would have been named a double free.
Now the build is unverified (guard off, coarse until its idle census balances) and, its free path
unannounced, the owner check stays off: a healthy run names nothing and loses nothing.
"""

from __future__ import annotations

import pytest
from tests.probe.vllm.free_first import GUARD, changed, serve

from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.lifecycle import attach
from poolwatch.probe.vllm.engine import VLLM, vllm_release
from poolwatch.probe.vllm.extras import VllmProbe
from poolwatch.probe.vllm.free_path import FREES
from rigs.fakes.vllm import Scheduler


@pytest.mark.parametrize("version", ["0.34.0rc1", "0.34.0.dev12+g1a2b3c4", "0.34.0+cu128"])
def test_a_build_whose_free_path_changed_names_nothing_and_guard_stays_off(
    version: str, made: list[object]
) -> None:
    sched = changed()
    made.append(sched)
    probe = attach(VLLM, sched, GUARD, release=vllm_release(version))
    assert isinstance(probe, VllmProbe)
    assert not probe.release.verified
    assert probe.refuser is None  # guard off on an unverified build
    serve(sched, 40)
    assert probe.tripwires.all() == ()
    assert probe.free_path.failed  # said why, once
    assert sched.pool.free_block_queue.num_free_blocks == 63  # every healthy free went through


def test_the_same_stand_in_read_as_the_release_would_name_every_healthy_free(made: list[object]) -> None:
    """Why the check exists: a verified reading of that build misjudges each free."""
    sched = changed()
    made.append(sched)
    plain = ProbeConfig(serve=False, sample_interval_s=0.01, directory="/nonexistent-poolwatch-path")
    probe = attach(VLLM, sched, plain, release=vllm_release("0.34.0"))
    assert isinstance(probe, VllmProbe)
    serve(sched, 3)
    assert probe.tripwires.all() != ()


def test_an_unverified_build_that_announces_its_frees_gets_the_owner_check_after_the_first_ones(
    made: list[object],
) -> None:
    sched = Scheduler(64)
    made.append(sched)
    probe = attach(VLLM, sched, GUARD, release=vllm_release("0.34.0rc1"))
    assert isinstance(probe, VllmProbe)
    serve(sched, FREES + 1)
    assert probe.free_path.passed
    assert not probe.free_path.failed
    shared = sched.add("a", 2)
    sched.add("b", 1, prefix=shared)
    sched.schedule()
    sched.pool.free_blocks(list(shared))  # a's blocks freed while a and b still list them
    assert {t.kind.value for t in probe.tripwires.all()} == {"ref_below_owners"}
