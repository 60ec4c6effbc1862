"""The engine's call site: its frames only, innermost first, bounded, captured once per finding.

The stand-in engine is ``tests/probe/core/fake_engine``: a scheduler that frees into a pool from
known lines, and a loop that calls a hooked method."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.probe.core.fake_engine.scheduler import Scheduler, line_of

from poolwatch.model.findings import CallSite, CallSiteKind, Frame, RepairKind, Tripwire, TripwireKind
from poolwatch.model.rank import Pool
from poolwatch.probe.core import hooks
from poolwatch.probe.core.call_site import MAX_ENGINE_FRAMES, CallSites
from poolwatch.probe.core.repairs import RepairLog
from poolwatch.probe.core.tripwires import MAX_UPGRADES, TripwireLog

ENGINE = "tests.probe.core.fake_engine"
FILE = "fake_engine/scheduler.py"


class CountingSites(CallSites):
    """The real capture, counted."""

    def __init__(self, package: str = ENGINE) -> None:
        super().__init__(package)
        self.captures = 0

    def capture(self, seq: int, kind: CallSiteKind = CallSiteKind.FREE) -> CallSite | None:
        self.captures += 1
        return super().capture(seq, kind)


def _wrap_free(sched: Scheduler, look: Callable[[list[int]], None]) -> None:
    """What a probe does to a pool: its instance's ``free`` looks first, then frees."""
    original = sched.pool.free

    def free(ids: list[int]) -> None:
        look(ids)
        original(ids)

    sched.pool.free = free  # type: ignore[method-assign]


def test_a_capture_inside_a_wrapped_free_names_the_engine_lines_that_freed_innermost_first() -> None:
    sched, sites, got = Scheduler(), CallSites(ENGINE), []
    _wrap_free(sched, lambda ids: got.append(sites.capture(7)))
    sched.finish([3])
    assert got == [
        CallSite(
            CallSiteKind.FREE,
            (
                Frame(FILE, line_of("FREES"), "Scheduler.release"),
                Frame(FILE, line_of("RELEASES"), "Scheduler.finish"),
            ),
            seq=7,
        )
    ]
    assert sched.pool.free_slots == [3]


def test_a_capture_at_a_hook_says_so_and_names_where_the_engine_called_the_hook() -> None:
    sites, got = CallSites(ENGINE), []

    class Probe:
        def on_step(self, hook: str) -> None:
            got.append(sites.capture(9))

    class Hooked(Scheduler):
        pass

    hooks.install(Hooked, ((("step",), "before", "on_step"),), Probe, None, lambda s, _: Probe())
    try:
        sched = Hooked()
        sched._poolwatch_probe = Probe()  # type: ignore[attr-defined]
        sched.loop()
    finally:
        hooks.uninstall(Hooked)
    assert got == [CallSite(CallSiteKind.HOOK, (Frame(FILE, line_of("STEPS"), "Scheduler.loop"),), seq=9)]


def test_a_capture_keeps_at_most_eight_engine_frames_and_walks_a_bounded_depth() -> None:
    sched, sites, got = Scheduler(), CallSites(ENGINE), []
    sched.deep(30, lambda: got.append(sites.capture(1)))
    assert got[0] is not None
    assert len(got[0].frames) == MAX_ENGINE_FRAMES
    assert {f.function for f in got[0].frames} == {"Scheduler.deep"}

    def far_below(n: int) -> CallSite | None:  # 60 frames of someone else's code under the engine's
        return far_below(n - 1) if n else sites.capture(1)

    sched.deep(0, lambda: got.append(far_below(60)))
    assert got[1] is None


def test_no_engine_frame_or_no_engine_package_captures_nothing() -> None:
    assert CallSites(ENGINE).capture(1) is None  # called by the test, not the engine
    sched, got = Scheduler(), []
    _wrap_free(sched, lambda ids: got.append(CallSites("").capture(1)))
    sched.finish([1])
    assert got == [None]


def test_a_frame_outside_the_engine_package_directory_shows_its_base_name_only() -> None:
    sites = CallSites(ENGINE)
    assert sites._file("/home/alice/src/fake_engine/other.py") == "other.py"


def test_a_new_tripwire_carries_the_call_site_and_a_repeat_captures_nothing() -> None:
    sites = CountingSites()
    log = TripwireLog(sites=sites)
    sched = Scheduler()
    found = Tripwire(TripwireKind.FREE_AND_LIVE, Pool.MAMBA, (3,), "free", 5)
    _wrap_free(sched, lambda ids: log.add([found]))
    sched.finish([3])
    sched.finish([3])  # the same slot again: the same finding
    (kept,) = log.all()
    assert kept.call_site is not None
    assert kept.call_site.frames[0] == Frame(FILE, line_of("FREES"), "Scheduler.release")
    assert sites.captures == 1


def test_a_finding_that_brings_its_own_call_site_keeps_it() -> None:
    site = CallSite(CallSiteKind.FREE, (Frame("x.py", 1, "f"),))
    log = TripwireLog(sites=CountingSites())
    log.add([Tripwire(TripwireKind.FREE_DUPLICATE, Pool.FULL, (1,), "h", 1, call_site=site)])
    assert log.all()[0].call_site == site


def test_a_repair_captures_once_per_kind_pool_and_path_and_repeats_it_after() -> None:
    sites = CountingSites()
    log = RepairLog(sites)
    sched = Scheduler()
    done: list[Any] = []
    refuse = RepairKind.REFUSE
    _wrap_free(sched, lambda ids: done.append(log.record(refuse, Pool.MAMBA, ids, ("r",), "free", 4)))
    sched.finish([2])
    sched.finish([5])
    first, second = done
    assert first.call_site == second.call_site
    assert first.call_site.frames[0].function == "Scheduler.release"
    assert second.count == 2
    assert sites.captures == 1
    log.record(RepairKind.REFUSE, Pool.MAMBA, [6], (), "other_path", 9)
    assert sites.captures == 2


def test_the_next_identical_free_gives_its_site_to_the_finding_made_after_the_fact() -> None:
    log = TripwireLog(sites=CountingSites())
    hook = CallSite(CallSiteKind.HOOK, (Frame(FILE, 1, "Scheduler.loop"),), 3)
    log.add([Tripwire(TripwireKind.FREE_AND_LIVE, Pool.MAMBA, (4,), "chunk", 3, call_site=hook)])
    log.add([Tripwire(TripwireKind.MISSING, Pool.FULL, (9,), "chunk", 3)])
    caught = CallSite(CallSiteKind.NEXT_FREE, (Frame(FILE, 2, "Scheduler.release"),), 8)
    assert log.witness(Pool.MAMBA, (TripwireKind.FREE_AND_LIVE,), caught)
    live, leak = log.all()
    assert live.call_site == caught
    assert leak.call_site != caught
    assert not log.witness(Pool.SWA, (TripwireKind.FREE_AND_LIVE,), caught)


def test_a_finding_first_seen_at_a_hook_takes_the_site_of_a_free_that_repeats_it() -> None:
    sites = CountingSites()
    log = TripwireLog(sites=sites)
    at_hook = CallSite(CallSiteKind.HOOK, (Frame(FILE, line_of("STEPS"), "Scheduler.loop"),), 2)
    log.add([Tripwire(TripwireKind.REF_BELOW_OWNERS, Pool.FULL, (6,), "schedule", 2, call_site=at_hook)])
    sched = Scheduler()
    again = Tripwire(TripwireKind.REF_BELOW_OWNERS, Pool.FULL, (6,), "free_blocks", 5)
    changed: list[bool] = []
    _wrap_free(sched, lambda ids: changed.append(log.add([again])))
    sched.finish([6])
    sched.finish([6])  # it has a free's site now: a repeat captures nothing
    (kept,) = log.all()
    assert changed == [True, False]
    assert kept.call_site is not None
    assert kept.call_site.kind is CallSiteKind.FREE
    assert kept.call_site.frames[0] == Frame(FILE, line_of("FREES"), "Scheduler.release")
    assert (kept.first_seen_hook, kept.seq) == ("schedule", 2)  # still where it was first seen
    assert sites.captures == 1


def test_a_finding_repeated_only_at_hooks_stops_trying_for_a_better_site() -> None:
    sites = CountingSites()
    log = TripwireLog(sites=sites)
    seen = Tripwire(TripwireKind.FREE_AND_LIVE, Pool.MAMBA, (4,), "step", 1)
    for _ in range(3 * MAX_UPGRADES):
        log.add([seen])
    assert sites.captures == 1 + MAX_UPGRADES
    assert log.all()[0].call_site is None
