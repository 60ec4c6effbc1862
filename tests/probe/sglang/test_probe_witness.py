"""The line that freed it, on SGLang-shaped fakes: the seed free's call site with guard (the refusal's)
and without it (the chunk tripwire finds the slot after the free returned; a one-shot witness
catches the next identical free).

The test module is the stand-in engine's code here: the probe keeps the frames of
``tests.probe.sglang`` (the fakes and this module) as SGLang's, so ``seed_chunk`` below is the
"engine line" that frees the chunked request's Mamba slot, as 0.5.4's ``process_prefill_chunk`` does.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import replace
from typing import Any

from tests.probe.sglang.setups import GUARD_CONFIG

from poolwatch.model.findings import CallSiteKind, RepairKind, TripwireKind
from poolwatch.model.rank import Pool
from poolwatch.probe.lifecycle import attach, detach
from poolwatch.probe.sglang.engine import SGLANG
from poolwatch.probe.sglang.extras import SglangProbe
from rigs.fakes.clock import FakeClock
from rigs.fakes.sglang import Rank

ENGINE = replace(SGLANG, package="tests.probe.sglang")


def seed_chunk(sched: Any) -> None:
    """The chunk boundary as 0.5.4.post1 runs it: the chunked request's Mamba slot is freed."""
    sched.req_to_token_pool.mamba_pool.free(sched.chunked_req.mamba_pool_idx.reshape(1))  # SEED


SEED_LINE = next(i for i, text in enumerate(inspect.getsource(seed_chunk).splitlines()) if "# SEED" in text)
SEED_LINE += seed_chunk.__code__.co_firstlineno


def _attached(rank: Rank, *, guard: bool) -> SglangProbe:
    rank.sched.process_prefill_chunk = functools.partial(seed_chunk, rank.sched)  # type: ignore[method-assign]
    clock = FakeClock()
    probe = attach(
        ENGINE, rank.sched, replace(GUARD_CONFIG, guard=guard), environ={}, clock=clock, wall=clock
    )
    assert isinstance(probe, SglangProbe)
    return probe


def test_without_guard_the_first_finding_names_the_hook_and_the_next_free_names_the_line() -> None:
    rank = Rank(kv=64, mamba=8, rows=4)
    rank.chunked("long", origin=40, chunk=16)
    probe = _attached(rank, guard=False)
    try:
        rank.sched.process_prefill_chunk()  # the first wrong free: found after the hook, free gone
        (first,) = probe.tripwires.all()
        assert first.call_site is not None
        assert first.call_site.kind is CallSiteKind.HOOK
        assert "free" in vars(rank.mamba)  # armed: the next identical free is watched
        probe.seq = 12
        rank.sched.process_prefill_chunk()  # the same wrong free again
        found = {t.kind: t for t in probe.tripwires.all()}
    finally:
        detach(rank.sched)
    assert "free" not in vars(rank.mamba)  # one shot: the pool has its own free back
    live, twice = found[TripwireKind.FREE_AND_LIVE], found[TripwireKind.FREE_DUPLICATE]
    assert live.call_site is not None
    assert live.call_site.kind is CallSiteKind.NEXT_FREE
    assert live.call_site.seq == 12
    assert (live.call_site.frames[0].function, live.call_site.frames[0].line) == ("seed_chunk", SEED_LINE)
    assert twice.call_site == live.call_site  # the slot on the list twice: made by that same free
    assert live.seq < 12  # the finding keeps where it was first seen


def test_the_witness_lets_other_frees_through_unrecorded() -> None:
    rank = Rank(kv=64, mamba=8, rows=4)
    rank.chunked("long", origin=40, chunk=16)
    probe = _attached(rank, guard=False)
    try:
        rank.sched.process_prefill_chunk()
        spare = rank.mamba.take()
        rank.mamba.free(spare.reshape(1))  # a free of a slot nobody holds: not the wrong free
        assert probe.witness.armed
        assert not probe.witness.fired
        assert int(spare) in rank.mamba.free_slots.tolist()
    finally:
        detach(rank.sched)


def test_with_guard_the_refusal_names_the_line_that_called_the_free() -> None:
    rank = Rank(kv=64, mamba=8, rows=4)
    rank.chunked("long", origin=40, chunk=16)
    probe = _attached(rank, guard=True)
    try:
        rank.sched.process_prefill_chunk()
        (refused,) = probe.repairs.all()
    finally:
        detach(rank.sched)
    assert (refused.kind, refused.pool) == (RepairKind.REFUSE, Pool.MAMBA)
    assert refused.call_site is not None
    assert refused.call_site.kind is CallSiteKind.FREE
    assert (refused.call_site.frames[0].function, refused.call_site.frames[0].line) == (
        "seed_chunk",
        SEED_LINE,
    )
    assert not probe.witness.armed  # guard records the free itself: no witness
