"""The holder index's sync reads only what changed (the lists that came since the last sample), and
falls back to comparing every list when something else changed: a list gone without a pop, a list
replaced in place, a request forgotten with its list kept.  Either way its figures are what a fresh
count finds."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from poolwatch.probe.core.reading import Reading
from poolwatch.probe.vllm.holders import HolderIndex
from poolwatch.probe.vllm.sample import read_holders
from poolwatch.probe.vllm.shapes import shape_for
from rigs.fakes.vllm import Scheduler

SHAPE = shape_for("0.33.0")


class Counting(HolderIndex):
    """A holder index that counts the lists it reads."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def _read(self, key: tuple[int, str], blocks: Any, kind: str) -> None:
        self.reads.append(key[1])
        super()._read(key, blocks, kind)


def _sync(sched: Scheduler, index: HolderIndex) -> None:
    read_holders(sched, SHAPE, sched.pool, index, Reading())


def _fresh(sched: Scheduler) -> HolderIndex:
    fresh = HolderIndex()
    _sync(sched, fresh)
    return fresh


def _loaded(index: HolderIndex, requests: int, blocks: int, size: int = 1_024) -> Scheduler:
    """A scheduler with ``requests`` lists of ``blocks`` blocks each, synced once into ``index``."""
    sched = Scheduler(size)
    for i in range(requests):
        sched.add(f"r{i}", blocks)
    _sync(sched, index)
    return sched


def _pop(sched: Scheduler, index: HolderIndex, rid: str) -> None:
    """vLLM's pop of a finished request's list (the wrapped pop tells the index first), and its free."""
    index.released(0, rid, sched.managers[0].req_to_blocks[rid])
    sched.pool.free_blocks(reversed(sched.managers[0].req_to_blocks.pop(rid)))
    sched.requests.pop(rid, None)


def test_a_sync_reads_only_the_lists_that_came() -> None:
    index = Counting()
    sched = _loaded(index, 200, 3, size=4_096)
    assert len(index.reads) == 200  # the first sync reads every list
    index.reads.clear()
    for i in range(0, 200, 7):  # requests finish (popped), their lists grow, new ones come
        _pop(sched, index, f"r{i}")
    for i in range(1, 200, 5):
        if f"r{i}" in sched.managers[0].req_to_blocks:
            sched.managers[0].req_to_blocks[f"r{i}"].extend(sched.pool.get_new_blocks(1))
    sched.add("new0", 2)
    sched.add("new1", 4)
    _sync(sched, index)
    assert index.reads == ["new0", "new1"]  # nothing else: what grew is pending, what went was popped
    assert index.held(set(), set()) == _fresh(sched).held(set(), set())


def test_a_list_gone_without_a_pop_or_replaced_is_found_by_comparing_every_list() -> None:
    index = Counting()
    sched = _loaded(index, 20, 2)
    index.reads.clear()
    lists = sched.managers[0].req_to_blocks
    sched.pool.free_blocks(reversed(lists.pop("r3")))  # gone, no pop announced
    del sched.requests["r3"]
    lists["r7"] = lists["r7"][:1] + sched.pool.get_new_blocks(2)  # replaced in place (a swap)
    _sync(sched, index)
    assert index.reads == ["r7"]
    assert index.counts == _fresh(sched).counts
    assert index.held(set(), set()) == _fresh(sched).held(set(), set())


def test_a_request_forgotten_with_its_list_kept_is_named_stale() -> None:
    index = HolderIndex()
    sched = _loaded(index, 12, 2)
    del sched.requests["r4"]  # its list stays: a leak
    sched.add("r12", 1)  # ... while another request came (as many requests as before, less one list)
    for _ in range(10):  # found within STALE_EVERY syncs at the latest
        _sync(sched, index)
    held = index.held(set(), set())
    assert held.stale_requests == ("r4",)
    assert held == _fresh(sched).held(set(), set())


OPS = st.lists(
    st.tuples(st.sampled_from(["add", "grow", "pop", "drop", "replace", "forget"]), st.integers(0, 9)),
    max_size=50,
)


@settings(max_examples=80, deadline=None)
@given(OPS)
def test_every_sync_counts_what_a_fresh_count_does(ops: list[tuple[str, int]]) -> None:
    sched = Scheduler(512)
    index = HolderIndex()
    made = 0
    for op, k in ops:
        lists = sched.managers[0].req_to_blocks
        live = list(lists)
        if op == "add" or not live:
            sched.add(f"r{made}", 1 + k % 3)
            made += 1
        elif op == "grow":
            lists[live[k % len(live)]].extend(sched.pool.get_new_blocks(1))
        elif op == "pop":
            _pop(sched, index, live[k % len(live)])
        elif op == "drop":  # gone without a pop
            rid = live[k % len(live)]
            sched.pool.free_blocks(reversed(lists.pop(rid)))
            sched.requests.pop(rid, None)
        elif op == "replace":  # a new list object under the same request
            rid = live[k % len(live)]
            old = lists[rid]
            sched.pool.free_blocks(reversed(old))
            lists[rid] = sched.pool.get_new_blocks(len(old))
        elif op == "forget":
            sched.requests.pop(live[k % len(live)], None)
        _sync(sched, index)
        fresh = _fresh(sched)
        assert index.held(set(), set()).held == fresh.held(set(), set()).held
        read_holders(sched, SHAPE, sched.pool, index, Reading(), read=True)  # every pending entry read
        assert index.counts == fresh.counts


def test_a_list_first_seen_empty_is_read_when_its_prefix_hits_land() -> None:
    """vLLM 0.10.2 sizes an allocation through ``req_to_blocks[rid]`` (a defaultdict): a waiting
    request whose allocation failed has an empty list, and its prefix hits come into it later."""
    index = Counting()
    sched = _loaded(index, 2, 3)
    sched.requests["w"] = type(sched.requests["r0"])("w")
    waiting = sched.managers[0].req_to_blocks["w"]  # sized, not allocated: an empty list
    _sync(sched, index)
    shared = sched.managers[0].req_to_blocks["r0"][:2]
    sched.pool.touch(shared)
    waiting.extend(shared)  # its prefix hits on r0's blocks
    _sync(sched, index)
    assert index.reads[-1] == "w"
    assert index.held(set(), set()) == _fresh(sched).held(set(), set())
