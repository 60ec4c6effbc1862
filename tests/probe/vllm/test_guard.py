"""vLLM guard (``POOLWATCH_PROBE_GUARD=1``) on the block-pool stand-in (rigs/fakes/vllm.py):
each wrong free is refused inside ``free_blocks`` and what is handed on leaves the pool exactly
sound -- ``ref_cnt`` equal to the owners of every block, the free queue holding exactly the blocks
at 0, each once -- on a single-pass family (0.33) and a two-pass one (0.18); a sound run refuses
nothing; guard stays off by default, on an unverified release, with HiSparse, and under every kill
switch.  The real classes are driven in tests/vllm_real (check_release.py, ``guard_*`` checks)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poolwatch.conservation import findings
from poolwatch.detect.families.repairs import PROBE_REPAIRED, GuardRepairs
from poolwatch.detect.family import Seen
from poolwatch.detect.schema import Severity
from poolwatch.model.findings import RepairKind, TripwireKind
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.lifecycle import attach, detach
from poolwatch.probe.vllm.engine import VLLM, vllm_release
from poolwatch.probe.vllm.extras import VllmProbe
from poolwatch.probe.vllm.refuse import admit
from rigs.fakes.vllm import Block, Scheduler

GUARD = ProbeConfig(serve=False, sample_interval_s=0.01, directory="/nonexistent-poolwatch-guard", guard=True)
FAMILIES = {"0.33.0": False, "0.18.0": True}  # release -> two-pass free


def make(release: str = "0.33.0", config: ProbeConfig = GUARD, n: int = 64) -> tuple[Scheduler, VllmProbe]:
    two_pass = FAMILIES.get(release, False)
    sched = Scheduler(n, deferred=not two_pass, two_pass=two_pass)
    probe = attach(VLLM, sched, config, release=vllm_release(release))
    assert isinstance(probe, VllmProbe)
    return sched, probe


@pytest.fixture(params=sorted(FAMILIES))
def guarded(request: pytest.FixtureRequest) -> Iterator[tuple[Scheduler, VllmProbe]]:
    sched, probe = make(request.param)
    yield sched, probe
    detach(sched)


def queued(sched: Scheduler) -> list[int]:
    q = sched.pool.free_block_queue
    out, node = [], q.fake_free_list_head.next_free_block
    while node is not None and node is not q.fake_free_list_tail and len(out) <= len(sched.pool.blocks):
        out.append(node.block_id)
        node = node.next_free_block
    return out


def owners(sched: Scheduler) -> Counter[int]:
    """Every block's occurrences in live requests' lists and the deferred frees."""
    own: Counter[int] = Counter()
    for mgr in sched.managers:
        for rid, blocks in mgr.req_to_blocks.items():
            if rid in sched.requests:
                own.update(b.block_id for b in blocks)
    for _fence, blocks in getattr(sched, "deferred_frees", ()):
        own.update(b.block_id for b in blocks)
    return own


def assert_sound(sched: Scheduler) -> None:
    """``ref_cnt == owners`` for every block, and the free queue is exactly the blocks at 0, once each."""
    free = queued(sched)
    assert len(free) == len(set(free)) == sched.pool.free_block_queue.num_free_blocks
    own = owners(sched)
    wrong = {
        b.block_id: (b.ref_cnt, own[b.block_id])
        for b in sched.pool.blocks[1:]
        if b.ref_cnt != own[b.block_id]
    }
    assert wrong == {}, "block: (ref_cnt, owners)"
    assert set(free) == {b.block_id for b in sched.pool.blocks[1:] if b.ref_cnt == 0}


def refused(probe: VllmProbe) -> tuple[int, ...]:
    done = [r for r in probe.repairs.all() if r.kind is RepairKind.REFUSE]
    return tuple(sorted(done[0].slots)) if done else ()


def ids(blocks: list[Block]) -> tuple[int, ...]:
    return tuple(sorted(b.block_id for b in blocks))


# --- each fault, refused --------------------------------------------------------------------------


def test_a_double_free_is_refused_and_the_blocks_stay_queued_once_at_zero(
    guarded: tuple[Scheduler, VllmProbe],
) -> None:
    sched, probe = guarded
    blocks = sched.add("a", 3)
    sched.schedule()
    sched.finish("a")
    sched.pool.free_blocks(reversed(blocks))  # a stale copy freed again
    assert [b.ref_cnt for b in blocks] == [0, 0, 0]
    assert_sound(sched)
    assert refused(probe) == ids(blocks)
    assert probe.tripwires.all() == ()  # averted: a repair (warning), not a DoubleFree page
    snap = probe.latest
    assert snap is not None
    assert snap.repairs[0].hook == "free_blocks"
    (signal,) = GuardRepairs().signals(Seen(snap, findings(snap)))
    assert (signal.alert, signal.severity) == (PROBE_REPAIRED, Severity.WARNING)
    shown = ", ".join(str(b.block_id) for b in reversed(blocks))  # as freed
    did = "refused to free 3 blocks already free or still listed by a request (a double or premature free)"
    assert f"{did}; last: block(s) [{shown}] after free_blocks" in signal.description
    assert "vLLM kept serving" in signal.description
    sched.pool.get_new_blocks(63)  # every free block handed out: vLLM's assert never fires


def test_a_shared_prefix_freed_twice_is_refused_and_stays_with_the_request_that_lists_it(
    guarded: tuple[Scheduler, VllmProbe],
) -> None:
    sched, probe = guarded
    shared = sched.add("a", 2)
    sched.add("b", 1, prefix=shared)
    sched.schedule()
    stale = list(sched.managers[0].req_to_blocks["a"])
    sched.finish("a")  # the sound free: 2 -> 1
    sched.pool.free_blocks(reversed(stale))  # the double free: refused (1 stays 1, b's)
    assert [b.ref_cnt for b in shared] == [1, 1]
    assert_sound(sched)
    assert refused(probe) == ids(shared)
    assert probe.repairs.all()[0].requests == ("b",)  # whose KV the free would have handed away


def test_a_block_listed_twice_in_one_free_passes_once_42571(guarded: tuple[Scheduler, VllmProbe]) -> None:
    sched, probe = guarded
    blocks = sched.add("a", 3)
    sched.managers[0].req_to_blocks["a"].append(blocks[1])  # one block listed twice, one reference
    snap = probe.sample_now("census", census=True)
    assert snap is not None
    assert {t.kind for t in snap.tripwires} == {TripwireKind.REF_BELOW_OWNERS}  # the walk sees it first
    sched.finish("a")
    assert blocks[1].ref_cnt == 0
    assert_sound(sched)
    assert refused(probe) == (blocks[1].block_id,)
    assert probe.repairs.all()[0].count == 1
    assert probe.tripwires.all() == ()  # the walk's finding is settled: the refusal left it sound


def test_a_block_listed_twice_is_judged_against_holders_that_came_after_the_last_sample() -> None:
    """(Found by the random run below.)  The pop announces the free, but a request that took the
    block by a prefix hit after the last sample is not counted yet: a list with a block twice is
    judged against the lists as they are now."""
    sched, probe = make()
    try:
        blocks = sched.add("a", 1)
        sched.add("b", 1, prefix=blocks)
        sched.schedule()
        sched.add("c", 1, prefix=blocks)  # a third holder, since the last sample
        sched.managers[0].req_to_blocks["a"].append(blocks[0])  # listed twice, one reference
        sched.finish("a")  # 3 references, 2 left listed: one decrement of the two passes
        assert blocks[0].ref_cnt == 2
        assert_sound(sched)
        assert refused(probe) == ids(blocks)
    finally:
        detach(sched)


def test_a_finish_announces_its_pop_once_so_a_later_stale_free_is_read_afresh() -> None:
    """0.24+: a manager's ``free`` pops through its own ``pop_blocks_for_free``, both wrapped: the
    pop is announced once, and nothing is left expected once the free ran."""
    sched, probe = make()
    try:
        shared = sched.add("a", 2)
        sched.schedule()
        stale = list(sched.managers[0].req_to_blocks["a"])
        sched.add("b", 1, prefix=shared)  # since the last sample: counted only when read afresh
        sched.finish("a")
        assert probe.reader.index.expected == {}
        sched.pool.free_blocks(reversed(stale))  # so the double free is judged against b's list
        assert [b.ref_cnt for b in shared] == [1, 1]
        assert_sound(sched)
    finally:
        detach(sched)


def test_a_premature_free_is_refused_and_the_request_keeps_its_blocks(
    guarded: tuple[Scheduler, VllmProbe],
) -> None:
    sched, probe = guarded
    blocks = sched.add("a", 3)
    sched.add("b", 2)  # allocated after the last sample: read at the free
    sched.pool.free_blocks([blocks[2], blocks[0]])
    assert [b.ref_cnt for b in blocks] == [1, 1, 1]
    assert_sound(sched)
    assert refused(probe) == (blocks[0].block_id, blocks[2].block_id)
    assert probe.repairs.all()[0].requests == ("a",)


def test_only_the_wrong_part_of_a_free_is_refused() -> None:
    sched, probe = make()
    try:
        lone = sched.add("a", 2)
        victim = sched.add("b", 1)
        sched.schedule()
        popped = sched.managers[0].req_to_blocks.pop("a")  # a's sound free, with b's block slipped in
        del sched.requests["a"]
        sched.pool.free_blocks([*reversed(popped), victim[0]])
        assert [b.ref_cnt for b in lone] == [0, 0]  # a's went back
        assert victim[0].ref_cnt == 1  # b's did not
        assert_sound(sched)
        assert refused(probe) == ids(victim)
    finally:
        detach(sched)


def test_blocks_freed_while_a_deferred_free_holds_them_are_refused_until_it_drains() -> None:
    sched, probe = make("0.33.0")
    try:
        blocks = sched.add("a", 2)
        sched.schedule()
        sched.deferred_frees.append((3, sched.managers[0].req_to_blocks.pop("a")))
        sched.finish("a")
        sched.pool.free_blocks(reversed(blocks))  # the #45357 class: returned while a step may write them
        assert [b.ref_cnt for b in blocks] == [1, 1]
        assert_sound(sched)
        assert refused(probe) == ids(blocks)
        assert probe.repairs.all()[0].requests == ("deferred@3",)
        sched.pool.free_blocks(reversed(sched.deferred_frees.popleft()[1]))  # the drain: sound
        assert_sound(sched)
        assert probe.repairs.all()[0].count == 2
    finally:
        detach(sched)


def test_a_deferred_entry_freed_early_is_judged_against_requests_newer_than_the_last_sample() -> None:
    """(Found on real 0.33.0, tests/vllm_real/check_deferred.py.)  The entry's pop announced its
    blocks, so the early free looks expected; a block a side owner still holds has the lists read
    afresh, and the prefix a request took since the last sample is counted."""
    sched, probe = make("0.33.0")
    try:
        blocks = sched.add("a", 2)
        sched.schedule()
        sched.add("b", 1, prefix=blocks)  # since the last sample
        sched.deferred_frees.append((3, sched.managers[0].pop_blocks_for_free("a")))  # announced
        sched.finish("a")
        sched.pool.free_blocks(reversed(blocks))  # freed early: 2 -> 1 would leave b's prefix short
        assert [b.ref_cnt for b in blocks] == [2, 2]
        assert_sound(sched)
        assert refused(probe) == ids(blocks)
    finally:
        detach(sched)


# --- what is handed on ------------------------------------------------------------------------------


def test_a_two_pass_free_gets_each_block_once_per_call() -> None:
    b1, b2, null = Block(1, ref_cnt=2), Block(2, ref_cnt=1), Block(0, is_null=True)
    got = admit([b1, null, b2, b1, null, b1], {1: 2}, rounds=True)
    assert got.calls == ([b1, null, b2, null], [b1])
    assert got.refused == {1: 1}
    assert admit([b1, b2, b1, b1], {1: 2}, rounds=False).calls == ([b1, b2, b1],)


def test_everything_refused_hands_on_nothing() -> None:
    b = Block(1, ref_cnt=0)
    assert admit([b, b], {1: 0}, rounds=False).calls == ()


def test_on_a_two_pass_family_a_block_kept_twice_is_queued_once() -> None:
    sched, probe = make("0.18.0")
    try:
        blocks = sched.add("a", 1)
        block = blocks[0]
        sched.pool.touch([block])  # a second reference ...
        sched.managers[0].req_to_blocks["a"] += [block, block]  # ... and listed three times
        sched.finish("a")  # two decrements pass, in two calls: 2 -> 1 -> 0, queued once
        assert block.ref_cnt == 0
        assert_sound(sched)
        assert refused(probe) == (block.block_id,)
    finally:
        detach(sched)


# --- a sound run refuses nothing; and the faults of a random run leave the pool sound -------------


def test_a_sound_run_of_finishes_prefix_hits_and_deferred_frees_refuses_nothing() -> None:
    sched, probe = make()
    try:
        for step in range(40):
            shared = sched.add(f"p{step}", 2)
            sched.add(f"q{step}", 1, prefix=shared)
            sched.schedule()
            sched.finish(f"p{step}")
            if step % 3 == 0:
                sched.deferred_frees.append((step, sched.managers[0].req_to_blocks.pop(f"q{step}")))
                sched.finish(f"q{step}")
                sched.schedule()
                sched.pool.free_blocks(reversed(sched.deferred_frees.popleft()[1]))
            else:
                sched.finish(f"q{step}")
            sched.update_from_output()
            assert_sound(sched)
        assert probe.repairs.all() == ()
        assert probe.tripwires.all() == ()
    finally:
        detach(sched)


FAULTS = ("double_free", "premature", "duplicate", "shared_twice", "early_deferred")
OPS = st.lists(
    st.tuples(
        st.sampled_from(("add", "hit", "finish", "defer", "drain", "sample", *FAULTS)), st.integers(0, 7)
    ),
    max_size=50,
)


def _op(sched: Scheduler, op: str, k: int, names: list[str], stale: list[list[Block]]) -> None:
    live = [n for n in names if n in sched.requests]
    if op == "add" or (op not in ("drain", "sample", "double_free") and not live):
        names.append(f"r{len(names)}")
        sched.add(names[-1], 1 + k % 3)
        return
    rid = live[k % len(live)] if live else ""
    lists = sched.managers[0].req_to_blocks
    if op == "hit":
        names.append(f"r{len(names)}")
        sched.add(names[-1], 1, prefix=list(lists[rid][: 1 + k % 2]))
    elif op in ("finish", "shared_twice", "duplicate"):
        stale.append(list(lists[rid]))
        if op == "duplicate":
            lists[rid].append(lists[rid][-1])
        sched.finish(rid)
        if op == "shared_twice":
            sched.pool.free_blocks(reversed(stale[-1]))
    elif op == "defer" and hasattr(sched, "deferred_frees"):
        sched.deferred_frees.append((k, sched.managers[0].pop_blocks_for_free(rid)))  # announced
        sched.finish(rid)
    elif op == "drain" and getattr(sched, "deferred_frees", None):
        sched.pool.free_blocks(reversed(sched.deferred_frees.popleft()[1]))
    elif op == "early_deferred" and getattr(sched, "deferred_frees", None):
        sched.pool.free_blocks(list(sched.deferred_frees[0][1]))
    elif op == "double_free" and stale:
        sched.pool.free_blocks(reversed(stale[k % len(stale)]))
    elif op == "premature":
        sched.pool.free_blocks(lists[rid][k % len(lists[rid]) :])
    elif op == "sample":
        sched.schedule()


@settings(max_examples=150, deadline=None)
@given(OPS, st.sampled_from(sorted(FAMILIES)))
def test_whatever_is_freed_wrongly_the_pool_stays_sound_and_no_allocation_asserts(
    ops: list[tuple[str, int]], release: str
) -> None:
    sched, probe = make(release, n=256)
    names: list[str] = []
    stale: list[list[Block]] = []
    try:
        for op, k in ops:
            _op(sched, op, k, names, stale)
            assert_sound(sched)
        assert probe.tripwires.all() == ()
        if not any(op in FAULTS for op, _ in ops):
            assert probe.repairs.all() == ()
        sched.pool.get_new_blocks(sched.pool.free_block_queue.num_free_blocks)  # vLLM's assert: silent
    finally:
        detach(sched)


# --- when guard is off -------------------------------------------------------------------------------


def test_guard_is_off_by_default_and_a_double_free_runs_untouched() -> None:
    sched, probe = make(config=replace(GUARD, guard=False))
    try:
        blocks = sched.add("a", 2)
        sched.finish("a")
        sched.pool.free_blocks(blocks)
        assert [b.ref_cnt for b in blocks] == [-1, -1]
        assert probe.latest is not None
        assert probe.latest.probe is not None
        assert probe.latest.probe.guard is False
        assert probe.repairs.all() == ()
    finally:
        detach(sched)


def test_a_kill_switch_turns_guard_off_with_the_probe(tmp_path: Path) -> None:
    sched, probe = make(config=replace(GUARD, directory=str(tmp_path)))
    try:
        assert probe.latest is not None
        assert probe.latest.probe is not None
        assert probe.latest.probe.guard
        blocks = sched.add("a", 2)
        sched.finish("a")
        (tmp_path / "DISABLE").touch()
        probe.switch.look(float("inf"))
        sched.pool.free_blocks(blocks)
        assert [b.ref_cnt for b in blocks] == [-1, -1]  # out of vLLM's way
        assert probe.repairs.all() == ()
    finally:
        detach(sched)


@pytest.mark.parametrize("version", ["0.33.1", "0.34.1"])
def test_guard_stays_off_on_a_release_never_read(version: str, caplog: pytest.LogCaptureFixture) -> None:
    sched, probe = make(version)
    try:
        assert probe.refuser is None
        assert "guard: off on this scheduler" in caplog.text
    finally:
        detach(sched)


def test_guard_stays_off_beside_a_hisparse_manager(caplog: pytest.LogCaptureFixture) -> None:
    sched = Scheduler(64)
    hisparse = type("HiSparseHotManager", (), {"block_pool": object(), "req_to_blocks": {}})()
    coordinator = sched.kv_cache_manager.coordinator
    coordinator.single_type_managers = (*coordinator.single_type_managers, hisparse)
    probe = attach(VLLM, sched, GUARD, release=vllm_release("0.33.0"))
    try:
        assert isinstance(probe, VllmProbe)
        assert probe.refuser is None
        assert probe.latest is not None
        assert probe.latest.probe is not None
        assert probe.latest.probe.guard is False
        assert "HiSparse" in caplog.text
    finally:
        detach(sched)
