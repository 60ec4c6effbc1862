"""Two layouts the probe reads exactly, on fakes with SGLang's field names:

* streaming-session slots (0.5.10+) hold a finished turn's row, KV and Mamba slots between turns;
  the censuses take them as owned (``session:<id>``) unless a live request runs on the row, in each
  release's shape: 0.5.10 - 0.5.18's flat ``SessionSlot``, 0.5.19 - 0.5.22's ``slot.kv`` and
  0.5.23's ``session_records()`` (S17's control: the slot is no leak while the session is open);
* 0.5.17 - 0.5.18 keep a request's allocated and SWA-evicted lengths in ``req.kv`` (``None`` once
  released) and its row and ``cache_protected_len`` on the request (S09's control).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from poolwatch.probe.core.reading import Reading
from poolwatch.probe.sglang.footprint import _one, full_private_range, holdings, swa_held
from poolwatch.probe.sglang.ledger import Ledger
from poolwatch.probe.sglang.mamba_census import mamba_census
from poolwatch.probe.sglang.requests import LiveSet
from poolwatch.probe.sglang.sessions import kv_span, mamba_ids, parked_sessions
from poolwatch.probe.sglang.shapes import HeldRule, shape_for_version


class _SessionCache:
    """A session cache wrapped round an empty tree (0.5.10 - 0.5.22: ``slots``, ``release_session``)."""

    def __init__(self, slots: dict[str, Any]) -> None:
        self.slots = slots
        self.root_node = SimpleNamespace(children={})

    def release_session(self, session_id: str) -> None:
        self.slots.pop(session_id, None)


class _UnifiedTree:
    """0.5.23's tree: its sessions' records by session id."""

    def __init__(self, records: dict[str, Any]) -> None:
        self.records = records

    def session_records(self) -> dict[str, Any]:
        return dict(self.records)


def _slot(row: int | None, mamba: int | None, ping_pong: list[int] | None = None, **kv: int) -> Any:
    return SimpleNamespace(
        req_pool_idx=row,
        cache_protected_len=kv.get("protected", 0),
        kv_allocated_len=kv.get("allocated", 0),
        mamba_pool_idx=None if mamba is None else torch.tensor([mamba]),
        mamba_ping_pong_track_buffer=None if ping_pong is None else torch.tensor(ping_pong),
    )


class _Req:
    """A 0.5.17 request: row and protected length on it, the lengths in ``req.kv``."""

    def __init__(self, rid: str, row: int | None, protected: int, allocated: int, evicted: int = 0) -> None:
        self.rid, self.req_pool_idx, self.cache_protected_len = rid, row, protected
        self.kv = (
            None if row is None else SimpleNamespace(kv_allocated_len=allocated, swa_evicted_seqlen=evicted)
        )
        self.finished_reason = None
        self.mamba_pool_idx = None

    def finished(self) -> bool:
        return self.finished_reason is not None


def test_a_parked_session_slot_is_a_holder_and_a_slot_a_live_request_runs_on_is_the_requests() -> None:
    parked = _slot(3, 7, [8, 9], protected=32, allocated=40)
    running = _slot(5, 11)
    tree = _SessionCache({"s1": parked, "s2": running, "empty": _slot(None, None)})
    turn = SimpleNamespace(req_pool_idx=5, kv=None)
    found = parked_sessions(tree, [turn])
    assert [name for name, _ in found] == ["session:s1"]
    record = found[0][1]
    assert kv_span(record, page=1) == (3, 32, 40)
    assert kv_span(record, page=16) == (3, 32, 48)  # the last page is the slot's whole
    assert [int(i) for t in mamba_ids(record) for i in t.tolist()] == [7, 8, 9]


def test_each_releases_session_record_is_read_in_its_own_shape() -> None:
    flat = _slot(2, 4)
    in_kv = SimpleNamespace(kv=_slot(3, 5))  # 0.5.19 - 0.5.22: the fields in slot.kv
    assert [n for n, _ in parked_sessions(_SessionCache({"a": flat, "b": in_kv}), [])] == [
        "session:a",
        "session:b",
    ]
    record = _slot(6, 12, [13, 14])
    record.mamba_ping_pong_empty = [True, False]  # 0.5.23: only the marked-full track slot is held
    ((_, got),) = parked_sessions(_UnifiedTree({"c": record}), [])
    assert [int(i) for t in mamba_ids(got) for i in t.tolist()] == [12, 14]
    assert parked_sessions(SimpleNamespace(slots={"x": flat}), []) == ()  # not a session cache


def _mamba_rank(slots: dict[str, Any]) -> Any:
    pool = SimpleNamespace(free_slots=torch.tensor([1, 2, 4]), size=5)
    return SimpleNamespace(
        req_to_token_pool=SimpleNamespace(mamba_pool=pool), tree_cache=_SessionCache(slots)
    )


def test_the_mamba_census_owns_a_parked_sessions_slots_and_names_them_once_the_session_lets_go() -> None:
    shape = shape_for_version("0.5.11")
    rank = _mamba_rank({"s": _slot(1, 3, [5])})
    reading = Reading()
    live = LiveSet((), (), None, sessions=parked_sessions(rank.tree_cache, []))
    census = mamba_census(rank, shape, reading, live, idle=True)
    assert census is not None, reading.failures
    assert census.missing_count == 0
    gone = LiveSet((), (), None)  # the session closed without freeing its slots (S17, 0.5.10)
    census = mamba_census(rank, shape, Reading(), gone, idle=True)
    assert census is not None
    assert census.missing == (3, 5)


def test_holdings_count_a_parked_sessions_mamba_slots_for_a_release_that_keeps_no_such_figure() -> None:
    shape = shape_for_version("0.5.10")
    live = LiveSet((), (), None, sessions=parked_sessions(_SessionCache({"s": _slot(1, 3, [4, 6])}), []))
    assert holdings(live, shape, 1, Reading(), full_exact=True).session_mamba == 3


def test_0_5_17_reads_a_requests_lengths_in_req_kv_and_its_row_on_the_request() -> None:
    shape = shape_for_version("0.5.17")
    assert shape.held_rule is HeldRule.KV_LENGTHS
    assert shape.mamba_allocator
    chunked = _Req("r", row=2, protected=64, allocated=1000, evicted=200)
    released = _Req("done", row=None, protected=0, allocated=0)
    live = LiveSet((chunked, released), (), chunked)
    reading = Reading()
    held = holdings(live, shape, 64, reading, full_exact=True)
    assert (held.rows, held.full) == (1, 1024 - 64), reading.failures
    assert full_private_range(chunked, shape, 64, live) == (2, 64, 1024)
    assert swa_held(live, shape, 64, reading) == 1024 - 64 - (200 - 64)
    assert full_private_range(released, shape, 64, live) is None
    per_request = [_one(r, shape, 64, live) for r in live.holders]  # the careful path agrees
    kept = Ledger().totals(live.holders, chunked, shape, 64, lambda r: _one(r, shape, 64, live))
    assert kept == tuple(sum(t[i] for t in per_request) for i in range(3))


def _dense_rank(capacity: int | None) -> Any:
    """A dense rank whose ``PoolStats`` states ``full_capacity`` (0.5.23), or leaves it ``None``
    (0.5.21's dense stats)."""
    stats = SimpleNamespace(full_capacity=capacity, full_available_size=200, full_evictable_size=56)
    return SimpleNamespace(
        pool_stats_observer=SimpleNamespace(get_pool_stats=lambda: stats),
        max_total_num_tokens=256,
        token_to_kv_pool_allocator=SimpleNamespace(available_size=lambda: 200),
        tree_cache=SimpleNamespace(evictable_size=lambda: 56, protected_size=lambda: 0),
        req_to_token_pool=SimpleNamespace(size=4, free_slots=[1, 2, 3, 4]),
    )


def test_a_capacity_pool_stats_leaves_unset_is_the_one_its_usage_divides_by() -> None:
    from poolwatch.model.rank import Pool
    from poolwatch.probe.sglang.footprint import Holdings
    from poolwatch.probe.sglang.pool_terms import PoolKinds, read_pools

    shape = shape_for_version("0.5.21")
    for capacity in (None, 256):
        reading = Reading()
        pools = read_pools(
            _dense_rank(capacity), shape, reading, Holdings(0, 0, 0, 0), "null", PoolKinds(False, False)
        )
        full = pools[Pool.FULL]
        assert (full.size, full.unreadable) == (256, ()), reading.failures
