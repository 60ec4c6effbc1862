"""The free-time check on the block-pool stand-in (rigs/fakes/vllm.py): a free that leaves a
block with fewer references than the lists still naming it is named at the free, before the block
can be handed to another request -- the shared-prefix double free vLLM itself never asserts on --
and a sound run of finishes, preemptions, prefix hits and deferred frees names nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poolwatch.model.findings import TripwireKind
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.reading import Reading
from poolwatch.probe.lifecycle import attach, detach
from poolwatch.probe.vllm.engine import VLLM, vllm_release
from poolwatch.probe.vllm.extras import VllmProbe
from poolwatch.probe.vllm.holders import HolderIndex
from poolwatch.probe.vllm.sample import read_holders
from poolwatch.probe.vllm.shapes import shape_for
from rigs.fakes.vllm import Scheduler

CONFIG = ProbeConfig(serve=False, sample_interval_s=0.01, directory="/nonexistent-poolwatch-free")


@pytest.fixture
def sched() -> Iterator[Scheduler]:
    s = Scheduler(64)
    yield s
    detach(s)


def attached(sched: Scheduler) -> VllmProbe:
    probe = attach(VLLM, sched, CONFIG, release=vllm_release("0.33.0"))
    assert isinstance(probe, VllmProbe)
    return probe


def named(probe: VllmProbe) -> dict[TripwireKind, tuple[int, ...]]:
    return {t.kind: tuple(sorted(t.slots)) for t in probe.tripwires.all()}


def test_a_shared_prefix_freed_twice_is_named_at_the_second_free_where_vllm_never_asserts(
    sched: Scheduler,
) -> None:
    probe = attached(sched)
    shared = sched.add("a", 2)
    sched.add("b", 1, prefix=shared)  # b's prefix hit: both blocks at ref_cnt 2
    sched.schedule()  # a step boundary: the probe has counted both lists
    stale = list(sched.managers[0].req_to_blocks["a"])  # a stale copy of a's table (a connector's, say)
    sched.finish("a")  # the sound free: 2 -> 1
    assert named(probe) == {}
    sched.pool.free_blocks(reversed(stale))  # the double free: 1 -> 0, back to the queue while b lists them
    ids = tuple(sorted(b.block_id for b in shared))
    assert named(probe) == {TripwireKind.REF_BELOW_OWNERS: ids}
    assert all(b.ref_cnt == 0 for b in shared)  # vLLM's own check sees nothing wrong: no assert ever fires
    assert probe.tripwires.all()[0].first_seen_hook == "free_blocks"


def test_shared_blocks_freed_once_too_often_from_two_are_named_though_their_count_stays_positive(
    sched: Scheduler,
) -> None:
    probe = attached(sched)
    shared = sched.add("a", 2)
    sched.add("b", 1, prefix=shared)
    sched.add("c", 1, prefix=shared)  # three lists: ref_cnt 3
    sched.schedule()
    sched.pool.free_blocks(list(shared))  # a's blocks freed while a still lists them: 3 -> 2
    assert named(probe) == {TripwireKind.REF_BELOW_OWNERS: tuple(sorted(b.block_id for b in shared))}
    assert all(b.ref_cnt == 2 for b in shared)


def test_a_premature_free_is_named_at_the_free_before_the_next_allocation(sched: Scheduler) -> None:
    probe = attached(sched)
    blocks = sched.add("a", 3)
    sched.schedule()
    victim = blocks[2]
    sched.pool.free_blocks([victim])  # freed while "a" still lists it: back on the queue at 0
    assert named(probe) == {TripwireKind.REF_BELOW_OWNERS: (victim.block_id,)}


def test_a_list_the_probe_has_not_counted_yet_is_read_before_a_block_is_named(sched: Scheduler) -> None:
    probe = attached(sched)
    blocks = sched.add("a", 2)  # allocated after the last sample: the index has not seen it
    sched.pool.free_blocks([blocks[0]])  # a premature free of a block only the new list names
    assert named(probe) == {TripwireKind.REF_BELOW_OWNERS: (blocks[0].block_id,)}


def unreadable() -> None:
    raise RuntimeError("the lists could not be read")


def test_a_double_free_is_named_at_the_free_when_reading_the_lists_fails_there(sched: Scheduler) -> None:
    probe = attached(sched)
    blocks = sched.add("a", 2)
    sched.schedule()
    stale = list(sched.managers[0].req_to_blocks["a"])
    sched.finish("a")  # the sound free: each block at 0
    probe.reader.resync = unreadable  # type: ignore[method-assign]  # the owner count's re-read fails
    sched.pool.free_blocks(reversed(stale))  # unannounced: the lists are read again, and that fails
    assert named(probe) == {TripwireKind.NEGATIVE_REF: tuple(sorted(b.block_id for b in blocks))}
    assert probe.guard.last_error == "free: RuntimeError: the lists could not be read"


def test_blocks_freed_while_a_deferred_free_still_holds_them_are_named_at_the_free(sched: Scheduler) -> None:
    probe = attached(sched)
    blocks = sched.add("a", 2)
    sched.schedule()
    sched.deferred_frees.append((4, sched.managers[0].req_to_blocks.pop("a")))  # popped, returned later
    sched.finish("a")
    sched.pool.free_blocks(reversed(blocks))  # returned now, while the entry stays (#45357)
    assert named(probe) == {TripwireKind.REF_BELOW_OWNERS: tuple(sorted(b.block_id for b in blocks))}


def test_finishes_preemptions_prefix_hits_and_deferred_frees_name_nothing(sched: Scheduler) -> None:
    probe = attached(sched)
    for step in range(40):
        shared = sched.add(f"p{step}", 2)
        sched.add(f"q{step}", 1, prefix=shared)
        sched.schedule()
        sched.finish(f"p{step}")  # the shared blocks stay with q
        if step % 3 == 0:
            blocks = sched.managers[0].req_to_blocks.pop(f"q{step}")  # a deferred free: popped now ...
            sched.deferred_frees.append((step, blocks))
            del sched.requests[f"q{step}"]
            sched.running = [r for r in sched.running if r.request_id != f"q{step}"]
            sched.schedule()
            sched.pool.free_blocks(reversed(sched.deferred_frees.popleft()[1]))  # ... returned later
        else:
            sched.finish(f"q{step}")
        sched.update_from_output()
    assert named(probe) == {}
    assert probe.reader.index.drift == 0


OPS = st.lists(
    st.tuples(
        st.sampled_from(["add", "hit", "grow", "finish", "requeue", "forget", "sample", "quiet"]),
        st.integers(0, 5),
    ),
    max_size=60,
)


def _pop(sched: Scheduler, index: HolderIndex, rid: str) -> list[Any]:
    """vLLM's pop of a request's list, as the wrapped pop tells the index first."""
    index.released(0, rid, sched.managers[0].req_to_blocks[rid])
    return sched.managers[0].req_to_blocks.pop(rid)


@settings(max_examples=80, deadline=None)
@given(OPS)
def test_the_incremental_index_counts_what_a_fresh_count_does(ops: list[tuple[str, int]]) -> None:
    sched = Scheduler(256)
    index = HolderIndex()
    shape = shape_for("0.33.0")
    names: list[str] = []
    for op, k in ops:
        live = [n for n in names if n in sched.managers[0].req_to_blocks]
        if op == "add" or (op in ("hit", "grow", "finish", "requeue", "forget") and not live):
            names.append(f"r{len(names)}")
            sched.add(names[-1], 1 + k % 3)
        elif op == "hit":
            prefix = sched.managers[0].req_to_blocks[live[k % len(live)]][:2]
            names.append(f"r{len(names)}")
            sched.add(names[-1], 1, prefix=list(prefix))
        elif op == "grow":
            rid = live[k % len(live)]
            sched.managers[0].req_to_blocks[rid].extend(sched.pool.get_new_blocks(1))
        elif op == "finish":
            rid = live[k % len(live)]
            sched.pool.free_blocks(reversed(_pop(sched, index, rid)))
            sched.requests.pop(rid, None)
        elif op == "requeue":  # preempted and resumed between two samples: a new list, the same length
            rid = live[k % len(live)]
            blocks = _pop(sched, index, rid)
            sched.pool.free_blocks(reversed(blocks))
            sched.managers[0].req_to_blocks[rid] = sched.pool.get_new_blocks(len(blocks))
        elif op == "forget":  # the scheduler forgets a request whose list stays: a stale list
            sched.requests.pop(live[k % len(live)], None)
        if op != "quiet":
            read = k == 0  # now and then, the free-time check's full read of what is pending
            read_holders(sched, shape, sched.pool, index, Reading(), read=read)
            fresh = HolderIndex()
            read_holders(sched, shape, sched.pool, fresh, Reading())
            assert index.held(set(), set()) == fresh.held(set(), set())
            if read:
                assert index.counts == fresh.counts


def test_a_free_that_dooms_enginecore_leaves_its_proof_as_the_ranks_final_snapshot(
    sched: Scheduler, tmp_path: Any
) -> None:
    """vLLM asserts at a block's next allocation once it was freed at ``ref_cnt`` 0: the proof is
    written as the rank's signed final snapshot before the probe waits for its sidecar, so the page
    still leaves when EngineCore is gone before a long-poll collected it."""
    from dataclasses import replace

    from poolwatch.codec.snapshot import parse_snapshot
    from poolwatch.discovery.files import read_secret
    from poolwatch.discovery.final import read_final_dir

    probe = attach(VLLM, sched, replace(CONFIG, directory=str(tmp_path)), release=vllm_release("0.33.0"))
    blocks = sched.add("a", 2)
    sched.schedule()
    stale = list(sched.managers[0].req_to_blocks["a"])
    sched.finish("a")  # the sound free: each block at 0
    assert read_final_dir(tmp_path, read_secret(tmp_path) or "") == []
    sched.pool.free_blocks(reversed(stale))  # freed again: ref_cnt -1, vLLM's assert comes next
    ((name, doc),) = read_final_dir(tmp_path, read_secret(tmp_path) or "")
    final = parse_snapshot(doc)
    assert name.endswith("-dp0-tp0-pp0.final")
    assert final.final
    assert {t.kind: tuple(sorted(t.slots)) for t in final.tripwires} == {
        TripwireKind.NEGATIVE_REF: tuple(sorted(b.block_id for b in blocks))
    }
    assert probe.final_cost > 0
    assert probe.latest is not None
    assert not probe.latest.final  # the rank still serves: only the file is final


def test_a_doomed_frees_proof_reaches_the_sidecars_store_through_the_long_poll(tmp_path: Any) -> None:
    """The proof amends the sample the sidecar already holds (its seq and clock, a new tripwire):
    the long-poll hands it over while the free waits, and the store keeps it (it took any snapshot
    of the held clock for a duplicate, and the page then depended on a later sample)."""
    import asyncio
    import threading
    from dataclasses import replace

    import httpx

    from poolwatch.discovery.directory import read_discovery_dir
    from poolwatch.sidecar.store import SnapshotStore
    from poolwatch.sources.base import Target
    from poolwatch.sources.probe_source import ProbeSource

    sched = Scheduler(64)
    config = replace(CONFIG, serve=True, directory=str(tmp_path), last_word_wait_s=2.0)
    attach(VLLM, sched, config, release=vllm_release("0.33.0"))
    try:
        sched.add("a", 2)
        sched.schedule()
        stale = list(sched.managers[0].req_to_blocks["a"])
        sched.finish("a")
        (entry,) = read_discovery_dir(tmp_path)
        store = SnapshotStore()

        async def sidecar() -> None:
            source = ProbeSource(Target("probe:a", "probe", entry.url), long_poll_s=2.0)
            async with httpx.AsyncClient() as client:
                (held,) = await source.scrape(client)
                assert store.put(held)
                assert not held.tripwires
                doomed = threading.Thread(target=lambda: sched.pool.free_blocks(reversed(stale)))
                doomed.start()
                (proof,) = await source.scrape(client)  # handed over while the free waits for it
                assert (proof.seq, proof.taken_at) == (held.seq, held.taken_at)
                assert store.put(proof)
                await asyncio.to_thread(doomed.join)

        asyncio.run(sidecar())
        (latest,) = store.latest()
        assert [t.kind for t in latest.tripwires] == [TripwireKind.NEGATIVE_REF]
    finally:
        detach(sched)
