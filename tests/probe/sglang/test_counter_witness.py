"""The counter witness on SGLang's shapes (fakes): the tree counters against the nodes by lock, a
chunk cache's counter against its requests' prefixes, a counter below zero, and the full-KV census's
page held both by a live request and by the tree.

A counter that drifted is published as the census counts it, with a witness naming it; the pool's
gap is then the census's (no double free for a counter-only bug), and a real double free beside it
is still named by the census's ids."""

from __future__ import annotations

from typing import Any

import torch

from poolwatch.conservation import gap
from poolwatch.model.findings import TripwireKind
from poolwatch.model.rank import Pool
from poolwatch.model.snapshot import Snapshot
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.lifecycle import attach, detach
from poolwatch.probe.sglang.engine import SGLANG
from poolwatch.probe.sglang.extras import SglangProbe
from rigs.fakes.sglang import DisaggregationMode, Rank, Req

CONFIG = ProbeConfig(
    sample_interval_s=0.0,
    census_interval_s=3600.0,  # no census by the clock: only the gap trigger, or asked for
    kv_census_interval_s=3600.0,
    idle_kv_census_gap_s=3600.0,
    serve=False,
    directory="/nonexistent-poolwatch-test-dir",
    release="0.5.4.post1",
)


def _probe(sched: Any, config: ProbeConfig = CONFIG) -> SglangProbe:
    probe = attach(SGLANG, sched, config)
    assert isinstance(probe, SglangProbe)
    return probe


def _boundary(sched: Any) -> Snapshot:
    sched.recv_requests()
    from poolwatch.probe.lifecycle import probe_of

    probe = probe_of(sched)
    assert probe is not None
    assert probe.latest is not None
    return probe.latest


def _busy_rank() -> tuple[Rank, Req]:
    rank = Rank(kv=64, mamba=8, rows=4)
    prefix = rank.cache(6, locked=True)
    req = rank.running("r1", origin=10, outputs=3, prefix=prefix)
    rank.cache(4, locked=False)
    return rank, req


def test_a_protected_counter_that_drifted_is_witnessed_and_the_gap_is_the_census() -> None:
    rank, _ = _busy_rank()
    probe = _probe(rank.sched)
    try:
        clean = _boundary(rank.sched)
        assert clean.witnesses == ()
        assert gap(clean.pools[Pool.FULL]) == 0
        rank.tree.full_protected_size_ += 41  # a release that forgets to take a request's share back
        snap = _boundary(rank.sched)  # the raw surplus is censused at once, at this very hook
        [w] = snap.witnesses
        assert (w.pool, w.figure, w.counter) == (Pool.FULL, "protected", "tree_cache.full_protected_size()")
        assert (w.reported, w.census, w.drift) == (47, 6, 41)
        assert snap.pools[Pool.FULL].protected == 6  # the census's count is what is published
        assert gap(snap.pools[Pool.FULL]) == 0
        assert snap.tripwires == ()
        later = _boundary(rank.sched)  # kept, with the first census's iteration, until it agrees
        assert later.witnesses[0].since_seq == w.since_seq
        assert gap(later.pools[Pool.FULL]) == 0
        rank.tree.full_protected_size_ -= 41
        probe.sample_now(census=True)
        assert probe.latest is not None
        assert probe.latest.witnesses == ()
    finally:
        detach(rank.sched)


def test_a_counter_below_zero_is_never_published_and_is_censused_at_once() -> None:
    rank, _ = _busy_rank()
    _probe(rank.sched)
    try:
        _boundary(rank.sched)
        rank.tree.full_protected_size_ = -12  # protected subtracted by hand past zero (#27666)
        snap = _boundary(rank.sched)
        [w] = snap.witnesses
        assert (w.reported, w.census) == (-12, 6)
        assert snap.pools[Pool.FULL].protected == 6
        assert all(v is None or v >= 0 for a in snap.pools.values() for v in (a.available, a.protected))
    finally:
        detach(rank.sched)


def test_an_evictable_drift_on_the_mamba_tree_is_witnessed_on_the_mamba_pool() -> None:
    rank, _ = _busy_rank()
    _probe(rank.sched)
    try:
        _boundary(rank.sched)
        rank.tree.mamba_evictable_size_ += 2
        snap = _boundary(rank.sched)
        [w] = snap.witnesses
        assert (w.pool, w.figure, w.drift) == (Pool.MAMBA, "evictable", 2)
        assert gap(snap.pools[Pool.MAMBA]) == 0
    finally:
        detach(rank.sched)


def test_tree_slots_freed_while_the_counters_say_the_tree_is_empty_are_still_named() -> None:
    """#27666: the counters cancel (the tree's locked node subtracted by hand) while its slots are
    freed: the books balance, so no gap asks for a census, but the next census reads the tree's
    structure, not the counters it checks."""
    rank = Rank(kv=64, mamba=8, rows=4)
    node = rank.cache(12, locked=True, with_mamba=False)
    probe = _probe(rank.sched)
    try:
        _boundary(rank.sched)
        rank.tree.full_protected_size_ -= 12
        rank.alloc.free(node.value)  # freed while the tree still owns them
        balanced = _boundary(rank.sched)
        assert gap(balanced.pools[Pool.FULL]) == 0  # the counters cancel: SGLang's own check passes
        assert balanced.tripwires == ()
        probe.sample_now(census=True)  # the next census (by the clock, or at idle)
        snap = probe.latest
        assert snap is not None
        kinds = {t.kind: t for t in snap.tripwires}
        assert set(kinds[TripwireKind.FREE_AND_TREE].slots) == set(node.value.tolist())
        [w] = snap.witnesses
        assert (w.figure, w.reported, w.census) == ("protected", 0, 12)
        assert gap(snap.pools[Pool.FULL]) == -12  # a real double free: the census's gap
    finally:
        detach(rank.sched)


def test_a_page_a_live_request_holds_that_the_tree_also_owns_is_named_with_its_request() -> None:
    rank, req = _busy_rank()
    probe = _probe(rank.sched)
    try:
        assert req.req_pool_idx is not None
        private = int(rank.rows.req_to_token[req.req_pool_idx, 8])
        rank.tree.add(torch.tensor([private]), None, locked=False)  # the tree takes a live request's slot
        probe.sample_now(census=True)
        snap = probe.latest
        assert snap is not None
        [trip] = [t for t in snap.tripwires if t.kind is TripwireKind.LIVE_AND_TREE]
        assert (trip.pool, trip.slots, trip.requests) == (Pool.FULL, (private,), ("r1",))
    finally:
        detach(rank.sched)


class ChunkCache:
    """SGLang's chunk cache up to 0.5.6: no tree; ``protected_size_`` moves with the prefixes."""

    def __init__(self) -> None:
        self.protected_size_ = 0

    def evictable_size(self) -> int:
        return 0

    def protected_size(self) -> int:
        return self.protected_size_


class HybridChunkCache(ChunkCache):
    """A hybrid model's chunk cache: the per-pool counters are the base class's 0; its count lives
    in ``protected_size()`` alone (0.5.4)."""

    def full_evictable_size(self) -> int:
        return 0

    def full_protected_size(self) -> int:
        return 0


def _decode_rank(*, hybrid: bool = False) -> tuple[Rank, Req]:
    rank = Rank(kv=64, mamba=8, rows=4)
    rank.sched.tree_cache = HybridChunkCache() if hybrid else ChunkCache()  # type: ignore[assignment]
    rank.sched.is_hybrid_gdn = hybrid
    if not hybrid:
        del rank.rows.mamba_pool
    sched: Any = rank.sched
    sched.disaggregation_mode = DisaggregationMode("decode")
    sched.disagg_decode_prealloc_queue = type("Q", (), {"queue": []})()
    sched.disagg_decode_transfer_queue = type("Q", (), {"queue": []})()
    req = Req("d1", 10)
    req.req_pool_idx = rank.rows.free_slots.pop(0)
    if hybrid:
        req.mamba_pool_idx = rank.mamba.take()
    req.output_ids = [5, 9]
    kv = rank.alloc.take(11)
    rank.rows.req_to_token[req.req_pool_idx, :11] = kv.to(torch.int32)
    req.prefix_indices = kv[:11]  # process_prebuilt: the chunk cache counts the transferred KV protected
    sched.tree_cache.protected_size_ += 11
    rank.sched.running_batch.reqs.append(req)
    rank.sched.last_batch = rank.sched.running_batch
    return rank, req


def test_a_chunk_cache_protected_counter_left_behind_by_a_release_is_a_witness_not_a_double_free() -> None:
    """#12774: the decode offload manager frees a finished request's KV and row itself and never
    takes its prefix back out of ``protected_size_``: the pool is whole, the counter is not."""
    rank, req = _decode_rank()
    _probe(rank.sched)
    try:
        first = _boundary(rank.sched)
        assert gap(first.pools[Pool.FULL]) == 0
        assert first.witnesses == ()
        req.finished_reason = "length"
        rank.sched.running_batch.reqs.clear()
        assert req.req_pool_idx is not None
        rank.alloc.free(rank.rows.req_to_token[req.req_pool_idx, :11].to(torch.int64))
        rank.rows.free_slots.append(req.req_pool_idx)
        snap = _boundary(rank.sched)
        [w] = snap.witnesses
        assert (w.figure, w.counter, w.reported, w.census) == (
            "protected",
            "tree_cache.protected_size()",
            11,
            0,
        )
        assert gap(snap.pools[Pool.FULL]) == 0
        assert snap.tripwires == ()
    finally:
        detach(rank.sched)


def test_while_the_decode_offload_manager_holds_requests_the_full_pool_and_rows_are_coarse() -> None:
    rank, req = _decode_rank()
    sched: Any = rank.sched
    sched.decode_offload_manager = type("M", (), {"ongoing_offload": {1: (req, None, None, 0.0, 10)}})()
    _probe(rank.sched)
    try:
        snap = _boundary(rank.sched)
        assert gap(snap.pools[Pool.FULL]) is None
        assert gap(snap.pools[Pool.REQ]) is None
        assert snap.queues["decode_offload"] == 1
    finally:
        detach(rank.sched)


def test_a_hybrid_chunk_cache_is_witnessed_by_the_counter_the_sample_reads() -> None:
    """A hybrid decode rank's chunk cache (0.5.4) keeps its count in ``protected_size()``; its
    ``full_protected_size()`` is the base class's 0.  The witness reads the counter the sample
    reads: a healthy prebuilt request is no drift (reading the other one made a 24 h emulated soak
    page a double free of every prebuilt slot)."""
    rank, _ = _decode_rank(hybrid=True)
    probe = _probe(rank.sched)
    try:
        snap = probe.sample_now("census", census=True)
        assert snap is not None
        assert snap.witnesses == ()
        assert gap(snap.pools[Pool.FULL]) == 0
        assert snap.tripwires == ()
    finally:
        detach(rank.sched)
