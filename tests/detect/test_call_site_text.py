"""The page names the line of engine code that made the wrong free (docs/alerting.md, "The line that
freed it"): a tripwire's and a refusal's call site in the alert's text, in each kind's words, and
nothing when none is known."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tests.notify.fakes import alert

from poolwatch.conservation import findings
from poolwatch.detect.call_site import chain
from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.families.balance import PoolBalance
from poolwatch.detect.families.repairs import GuardRepairs
from poolwatch.detect.family import Seen
from poolwatch.model.findings import CallSite, CallSiteKind, Frame, Repair, RepairKind, Tripwire, TripwireKind
from poolwatch.model.rank import Pool
from poolwatch.model.snapshot import Snapshot
from poolwatch.notify.cause import cause
from rigs.fakes.clock import FakeClock

FRAMES = (
    Frame("sglang/srt/mem_cache/memory_pool.py", 387, "HybridReqToTokenPool.free"),
    Frame(
        "sglang/srt/disaggregation/prefill.py",
        599,
        "SchedulerDisaggregationPrefillMixin.process_prefill_chunk",
    ),
    Frame("sglang/srt/managers/scheduler.py", 1020, "Scheduler.event_loop_normal_disagg_prefill"),
)
SEED = "…/memory_pool.py:387 free ← …/prefill.py:599 process_prefill_chunk ← …/scheduler.py:1020"


def described(snap: Snapshot, site: CallSite | None) -> str:
    wire = Tripwire(
        TripwireKind.FREE_AND_LIVE, Pool.MAMBA, (452,), "process_prefill_chunk", 411, call_site=site
    )
    tripped = replace(snap, tripwires=(wire,))
    (text,) = [
        s.description
        for s in PoolBalance(DetectorConfig()).signals(Seen(tripped, findings(tripped)))
        if "Tripwire" in s.description
    ]
    return text


def test_a_free_site_names_the_engine_lines_that_freed_the_slot(seed_snapshot: Snapshot) -> None:
    text = described(seed_snapshot, CallSite(CallSiteKind.FREE, FRAMES, 411))
    assert f"at iteration 411. Freed by {SEED} event_loop_normal_disagg_prefill." in text


def test_the_next_identical_free_is_named_with_the_iteration_it_was_caught_at(
    seed_snapshot: Snapshot,
) -> None:
    text = described(seed_snapshot, CallSite(CallSiteKind.NEXT_FREE, FRAMES, 415))
    assert (
        "The free had returned when the probe looked; the same free, caught again at iteration 415, "
        f"is made by {SEED} event_loop_normal_disagg_prefill." in text
    )


def test_a_hook_site_says_the_line_is_not_known_yet(seed_snapshot: Snapshot) -> None:
    text = described(seed_snapshot, CallSite(CallSiteKind.HOOK, FRAMES[2:], 411))
    assert (
        "The line that freed it is not known yet: the free had returned when the probe looked after "
        "process_prefill_chunk (called from …/scheduler.py:1020 event_loop_normal_disagg_prefill); "
        "the probe names the next identical free when it can." in text
    )


def test_no_site_adds_no_sentence(seed_snapshot: Snapshot) -> None:
    text = described(seed_snapshot, None)
    assert "Freed by" not in text
    assert "not known yet" not in text


def test_an_alert_names_four_frames_and_says_when_there_are_more() -> None:
    site = CallSite(CallSiteKind.FREE, FRAMES * 2)
    assert chain(site).count(" ← ") == 4
    assert chain(site).endswith(" ← …")


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        (RepairKind.REFUSE, "The refused free was called by"),
        (RepairKind.QUARANTINE, "It acted inside the free called by"),
    ],
)
def test_a_guard_action_inside_a_free_names_the_free_s_caller(
    seed_snapshot: Snapshot, kind: RepairKind, words: str
) -> None:
    done = Repair(
        kind,
        Pool.MAMBA,
        1,
        (452,),
        "mamba_pool.free",
        411,
        ("r1",),
        call_site=CallSite(CallSiteKind.FREE, FRAMES),
    )
    snap = replace(seed_snapshot, repairs=(done,))
    (signal,) = GuardRepairs().signals(Seen(snap, findings(snap)))
    assert f"{words} {SEED} event_loop_normal_disagg_prefill." in signal.description


def test_a_guard_action_at_a_hook_adds_no_call_site(seed_snapshot: Snapshot) -> None:
    done = Repair(
        RepairKind.QUARANTINE,
        Pool.MAMBA,
        1,
        (4,),
        "recv_requests",
        9,
        call_site=CallSite(CallSiteKind.HOOK, FRAMES),
    )
    snap = replace(seed_snapshot, repairs=(done,))
    (signal,) = GuardRepairs().signals(Seen(snap, findings(snap)))
    assert "called by" not in signal.description


def test_a_new_line_number_is_not_news_but_a_line_found_at_last_is(seed_snapshot: Snapshot) -> None:
    clock = FakeClock()

    def as_alert(site: CallSite | None) -> str:
        base = alert(clock)
        return cause(
            replace(base, annotations={**base.annotations, "description": described(seed_snapshot, site)})
        )

    moved = tuple(replace(f, line=f.line + 3) for f in FRAMES)
    found = as_alert(CallSite(CallSiteKind.NEXT_FREE, FRAMES, 415))
    assert found == as_alert(CallSite(CallSiteKind.NEXT_FREE, moved, 499))
    assert found != as_alert(CallSite(CallSiteKind.HOOK, FRAMES[2:], 411))


def test_a_leak_found_at_a_hook_names_no_line_for_it_was_made_by_no_free(seed_snapshot: Snapshot) -> None:
    lost = Tripwire(
        TripwireKind.MISSING,
        Pool.MAMBA,
        (9,),
        "recv_requests",
        7,
        call_site=CallSite(CallSiteKind.HOOK, FRAMES[2:]),
    )
    snap = replace(seed_snapshot, tripwires=(lost,))
    texts = [s.description for s in PoolBalance(DetectorConfig()).signals(Seen(snap, findings(snap)))]
    assert any("Tripwire missing" in t for t in texts)
    assert not any("not known yet" in t or "called from" in t for t in texts)
