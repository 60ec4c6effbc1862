"""Guard on a PD decode rank, on the emulator's pools and small fakes of SGLang's decode queues: a
request whose transfer is pending (its row and KV pre-allocated, the transfer engine writing them)
is refused outside SGLang's own processing of the queues, and up to 0.5.6 ``ChunkCache``'s release
(row first, then the KV through it) is not mistaken for a stale row's."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from poolwatch.model.rank import Pool
from poolwatch.probe.sglang.guard.paths import GUARD_PATHS
from poolwatch.probe.sglang.guard.refuser import FreeRefuser
from poolwatch_emulator.allocator import TokenToKVPoolAllocator
from poolwatch_emulator.req_pool import MambaPool, ReqToTokenPool

Seen = list[tuple[Pool, tuple[int, ...], tuple[str, ...], str, int]]


class TransferQueue:
    """``DecodeTransferQueue``'s lists: DecodeRequest-like entries, the deferred releases' tuples;
    ``pop_transferred`` is SGLang's own window (here: the failed transfer released inside it)."""

    def __init__(self, sched: Any) -> None:
        self.sched, self.queue, self._deferred_releases = sched, [], []  # type: ignore[var-annotated]

    def pop_transferred(self) -> None:
        for entry in self.queue:
            self.sched.release(entry.req)
        self.queue = []


class ChunkCache:
    """0.5.6's ``ChunkCache.cache_finished_req``: the row goes back first, then the KV through it."""

    disable = False

    def __init__(self, sched: Any) -> None:
        self.sched = sched

    def cache_finished_req(self, req: Any, is_insert: bool = True) -> None:
        pool = self.sched.req_to_token_pool
        kv = pool.req_to_token[req.req_pool_idx, : getattr(req, "kv_committed_len", req.allocated)]
        pool.free(req.req_pool_idx)
        self.sched.token_to_kv_pool_allocator.free(kv)


class Sched(SimpleNamespace):
    def release(self, req: Any) -> None:
        self.tree_cache.cache_finished_req(req)

    def release_kv_cache(self, req: Any) -> None:
        """0.5.6's ``release_kv_cache``: the tree's release, then the speculative over-allocation
        ``[ceil_page(kv_committed_len), kv_allocated_len)`` through the row it gave back."""
        self.tree_cache.cache_finished_req(req)
        page = self.token_to_kv_pool_allocator.page_size
        start = -(-req.kv_committed_len // page) * page
        if start < req.kv_allocated_len:
            row = self.req_to_token_pool.req_to_token[req.req_pool_idx]
            self.token_to_kv_pool_allocator.free(row[start : req.kv_allocated_len])


def _rank(family: str = "0.5.6", page: int = 1) -> tuple[Any, FreeRefuser, Seen]:
    sched = Sched(
        req_to_token_pool=ReqToTokenPool(4, 64),
        token_to_kv_pool_allocator=TokenToKVPoolAllocator(256, page),
        disagg_decode_transfer_queue=None,  # made after the scheduler, as init_disaggregation does
        disagg_decode_prealloc_queue=None,
    )
    sched.tree_cache = ChunkCache(sched)
    seen: Seen = []
    refuser = FreeRefuser(sched, lambda *a: seen.append(a), paths=GUARD_PATHS[family])
    assert refuser.install()
    assert refuser.pending is not None
    sched.disagg_decode_transfer_queue = TransferQueue(sched)
    return sched, refuser, seen


def _pre_alloc(sched: Any, rid: str, tokens: int) -> Any:
    """``_pre_alloc``: a row (``alloc(n)``, naming no request) and the KV the transfer writes into."""
    req = SimpleNamespace(rid=rid, req_pool_idx=None, cache_protected_len=0, mamba_pool_idx=None)
    (req.req_pool_idx,) = sched.req_to_token_pool.alloc(1)
    sched.req_to_token_pool.write(req.req_pool_idx, 0, sched.token_to_kv_pool_allocator.alloc(tokens))
    req.allocated = tokens
    return req


def _free_list(sched: Any) -> list[int]:
    alloc = sched.token_to_kv_pool_allocator
    return [*alloc.free_pages.tolist(), *alloc.release_pages.tolist()]


def test_a_decode_requests_kv_is_refused_while_its_transfer_is_pending() -> None:
    sched, _, seen = _rank()
    r = _pre_alloc(sched, "r", 6)
    sched.disagg_decode_transfer_queue.queue.append(SimpleNamespace(req=r))
    before = _free_list(sched)
    sched.token_to_kv_pool_allocator.free(sched.req_to_token_pool.req_to_token[r.req_pool_idx, :6])
    assert _free_list(sched) == before
    assert [(s[0], s[2]) for s in seen] == [(Pool.FULL, ("r (transfer pending)",))]
    sched.disagg_decode_transfer_queue.pop_transferred()  # SGLang's own window: released once
    assert len(_free_list(sched)) == len(before) + 6
    assert len(seen) == 1


def test_a_deferred_release_still_owns_its_slots_and_a_landed_transfer_does_not() -> None:
    sched, _, seen = _rank()
    r, x = _pre_alloc(sched, "r", 4), _pre_alloc(sched, "x", 4)
    queue = sched.disagg_decode_transfer_queue
    queue._deferred_releases.append((SimpleNamespace(req=r), 0.0, 1.0, 7, 1))  # aborted, not drained
    table, alloc = sched.req_to_token_pool.req_to_token, sched.token_to_kv_pool_allocator
    alloc.free(table[r.req_pool_idx, :4])
    assert [s[2] for s in seen] == [("r (transfer pending)",)]
    alloc.free(table[x.req_pool_idx, :4])  # x is on no queue: freed as asked
    assert len(seen) == 1
    assert set(table[x.req_pool_idx, :4].tolist()) <= set(_free_list(sched))


def test_the_mamba_slot_of_a_pending_decode_request_is_refused() -> None:
    sched, _, seen = _rank()
    mamba = MambaPool(8, first_id=1)
    sched.req_to_token_pool.mamba_pool = mamba
    refuser = FreeRefuser(sched, lambda *a: seen.append(a), paths=GUARD_PATHS["0.5.6"])
    sched.tree_cache = SimpleNamespace(root_node=SimpleNamespace(children={}))  # no ChunkCache here
    refuser.uninstall()
    assert refuser.install()
    r = _pre_alloc(sched, "r", 2)
    r.mamba_pool_idx = mamba.alloc(1)
    sched.disagg_decode_prealloc_queue = SimpleNamespace(queue=[SimpleNamespace(req=r)])
    mamba.free(r.mamba_pool_idx)
    assert int(r.mamba_pool_idx) not in mamba.free_slots.tolist()
    assert seen[-1][:3] == (Pool.MAMBA, (int(r.mamba_pool_idx),), ("r (transfer pending)",))


def test_a_chunk_caches_row_first_release_up_to_056_is_no_stale_row_but_a_second_release_is() -> None:
    sched, _, seen = _rank("0.5.6")
    r = _pre_alloc(sched, "r", 5)
    kv = sched.req_to_token_pool.req_to_token[r.req_pool_idx, :5].clone()
    before = _free_list(sched)
    sched.release(r)  # the row goes back, then the KV through it: SGLang's own order
    assert seen == []
    assert _free_list(sched) == before + kv.tolist()
    sched.release(r)  # the same request released again (its row is free now): refused whole
    assert _free_list(sched) == before + kv.tolist()
    assert [(s[0], s[1]) for s in seen] == [(Pool.FULL, tuple(kv.tolist()))]


@pytest.mark.parametrize("page", [1, 4])
def test_the_speculative_over_allocation_freed_after_a_row_first_release_is_its_own(page: int) -> None:
    """EAGLE spec v2 on 0.5.6: ``release_kv_cache`` frees the over-allocation through the row the
    chunk cache just gave back -- let through (guard refused it, and so leaked it, on every
    finished request of the real release: clean_spec); the same free again, or other columns of the
    given-back row right after a release, are a stale row's and refused."""
    sched, _, seen = _rank("0.5.6", page)
    r = _pre_alloc(sched, "r", 22)
    r.kv_committed_len, r.kv_allocated_len = 13, 22  # topped up past the committed KV, unaligned
    before = _free_list(sched)
    table = sched.req_to_token_pool.req_to_token
    sched.release_kv_cache(r)
    assert seen == []
    pages = {int(t) // page for t in table[r.req_pool_idx, :22].tolist()}
    assert sorted(_free_list(sched)) == sorted(before + sorted(pages))
    sched.token_to_kv_pool_allocator.free(table[r.req_pool_idx, 16:22])  # the over-allocation again
    assert len(seen) == 1
    s = _pre_alloc(sched, "s", 8)
    s.kv_committed_len, s.kv_allocated_len = 8, 8  # nothing over-allocated: no free follows
    sched.release_kv_cache(s)
    after = _free_list(sched)
    sched.token_to_kv_pool_allocator.free(table[s.req_pool_idx, 4:8])  # a stale free in its place
    assert len(seen) == 2
    assert _free_list(sched) == after


def test_without_row_first_the_family_keeps_the_stale_row_proof_everywhere() -> None:
    sched, refuser, seen = _rank("0.5.9")
    assert "cache_finished_req" not in vars(sched.tree_cache)
    r = _pre_alloc(sched, "r", 3)
    kv = sched.req_to_token_pool.req_to_token[r.req_pool_idx, :3]
    sched.req_to_token_pool.free(r.req_pool_idx)
    sched.token_to_kv_pool_allocator.free(kv)
    assert [s[0] for s in seen] == [Pool.FULL]
    refuser.uninstall()
    assert torch.equal(kv, sched.req_to_token_pool.req_to_token[r.req_pool_idx, :3])


def test_a_queue_changed_at_the_same_length_is_indexed_again() -> None:
    """The queue list keeps its identity and length while its request changes (one landed and
    left, another arrived, between two frees), as a replaced list can come back at a freed one's
    address: the landed request is no longer pending, and its own release of its KV is let
    through; the new one's is refused."""
    sched, _, seen = _rank()
    landed, arriving, other = (_pre_alloc(sched, rid, 4) for rid in ("landed", "arriving", "other"))
    queue = sched.disagg_decode_transfer_queue.queue
    queue.append(SimpleNamespace(req=landed))
    table, alloc = sched.req_to_token_pool.req_to_token, sched.token_to_kv_pool_allocator
    alloc.free(table[other.req_pool_idx, :4])  # a free while only "landed" is pending: indexed
    queue[:] = [SimpleNamespace(req=arriving)]  # the same list, the same length, another request
    alloc.free(table[landed.req_pool_idx, :4])
    assert seen == []
    assert set(table[landed.req_pool_idx, :4].tolist()) <= set(_free_list(sched))
    alloc.free(table[arriving.req_pool_idx, :4])
    assert [s[2] for s in seen] == [("arriving (transfer pending)",)]
