"""The one-shot witness on a free path: it catches the first wrong free's call site, then is gone."""

from __future__ import annotations

from tests.probe.core.fake_engine.scheduler import Scheduler, line_of

from poolwatch.model.findings import CallSite, CallSiteKind, Frame
from poolwatch.probe.core.call_site import CallSites
from poolwatch.probe.core.witness import FreeWitness

ENGINE = "tests.probe.core.fake_engine"


def _witness(sched: Scheduler, wrong_slot: int) -> tuple[FreeWitness, list[CallSite]]:
    caught: list[CallSite] = []
    witness = FreeWitness(CallSites(ENGINE), caught.append, lambda: 21)
    assert witness.arm(sched.pool, "free", lambda ids: wrong_slot in ids)
    return witness, caught


def test_the_first_wrong_free_is_caught_with_its_engine_line_and_the_path_given_back() -> None:
    sched = Scheduler()
    witness, caught = _witness(sched, wrong_slot=5)
    sched.finish([1, 2])  # not the wrong free
    assert caught == []
    sched.finish([5])
    sched.finish([5])  # a repeat: the witness is gone
    assert caught == [
        CallSite(
            CallSiteKind.NEXT_FREE,
            (
                Frame("fake_engine/scheduler.py", line_of("FREES"), "Scheduler.release"),
                Frame("fake_engine/scheduler.py", line_of("RELEASES"), "Scheduler.finish"),
            ),
            seq=21,
        )
    ]
    assert "free" not in vars(sched.pool)
    assert witness.fired
    assert not witness.armed
    assert sched.pool.free_slots == [1, 2, 5, 5]  # every free ran, unchanged


def test_a_witness_that_fired_or_a_path_already_wrapped_is_not_armed_again() -> None:
    sched = Scheduler()
    witness, _ = _witness(sched, wrong_slot=5)
    assert not witness.arm(sched.pool, "free", lambda ids: True)  # wrapped already (by itself)
    sched.finish([5])
    assert not witness.arm(sched.pool, "free", lambda ids: True)  # fired: one shot
    assert not witness.arm(None, "free", lambda ids: True)


def test_a_check_that_raises_lets_the_free_run_and_keeps_watching() -> None:
    sched = Scheduler()
    caught: list[CallSite] = []
    witness = FreeWitness(CallSites(ENGINE), caught.append, lambda: 1)

    def broken(ids: list[int]) -> bool:
        raise RuntimeError("unreadable")

    witness.arm(sched.pool, "free", broken)
    sched.finish([3])
    assert sched.pool.free_slots == [3]
    assert caught == []
    assert witness.armed
    witness.disarm()
    assert "free" not in vars(sched.pool)
