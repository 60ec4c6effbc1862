"""What the live requests of one rank hold: request rows, private full-KV, Mamba and SWA slots.

A live request (collected by :mod:`poolwatch.probe.sglang.requests`) holds a request row, private
full-KV slots (everything it allocated past the prefix the tree owns and it locks) and Mamba
slots (its working state, plus ping-pong track slots from 0.5.9).  Each release family keeps
these figures in other fields (:class:`~poolwatch.probe.sglang.shapes.HeldRule`): ``req.kv`` (0.5.23),
``req.kv.kv_allocated_len`` less the request's ``cache_protected_len`` (0.5.17), ``kv_allocated_len``
less ``cache_protected_len`` (0.5.6+), less ``len(prefix_indices)`` (0.5.5.post3), or the sequence
length less the prefix (0.5.4).  The per-request rules here are
also the full-KV census's (:func:`full_private_range`) and the Mamba census's
(:func:`mamba_slot_objects`).

Cost: O(live requests) with ``len()`` and Python ints only; no tensor contents are read.  The
holders are summed one attribute at a time at C speed (:mod:`poolwatch.probe.sglang.totals`); a failure
falls back to the careful per-request path here, which names the failing figure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from poolwatch.probe.core.reading import Reading
from poolwatch.probe.sglang.ledger import Ledger
from poolwatch.probe.sglang.requests import LiveSet
from poolwatch.probe.sglang.sessions import mamba_ids
from poolwatch.probe.sglang.shapes import HeldRule, Shape
from poolwatch.probe.sglang.totals import Memo, length_of

__all__ = ["Holdings", "full_private_range", "holdings", "mamba_slot_objects", "swa_held"]


def _no_swa() -> int | None:
    return None


@dataclass(frozen=True, slots=True)
class Holdings:
    rows: int
    full: int | None  # None: this release's figures cannot say exactly (see ``full_unknown``)
    mamba: int
    live: int
    swa: Callable[[], int | None] = _no_swa  # asked only on SWA-hybrid models (see ``swa_held``)
    session_mamba: int | None = None  # Mamba slots of parked session slots (:mod:`.sessions`)


def _finished(req: Any) -> bool:
    fn = getattr(req, "finished", None)
    return bool(fn()) if callable(fn) else False


def _ceil(n: int, page: int) -> int:
    return -(-n // page) * page if page > 1 else n


def _holds_row(req: Any, shape: Shape, live: LiveSet, finished: bool | None = None) -> bool:
    """Up to 0.5.6 a freed row leaves ``req_pool_idx`` set: a finished request holds none, and
    the chunked request holds one only while its chunk just ran (the row is freed at each chunk
    boundary and taken again when the next chunk is scheduled)."""
    if shape.held_rule is HeldRule.REQ_KV:
        return bool(req.kv.holds_kv)
    if req.req_pool_idx is None:
        return False
    if shape.row_pointer_cleared:
        return True
    done = _finished(req) if finished is None else finished
    return not done and (req is not live.chunked or live.chunk_ran)


def _full_private(req: Any, shape: Shape, page: int, chunked: Any) -> int:
    rule = shape.held_rule
    if rule is HeldRule.REQ_KV:
        return _ceil(int(req.kv.kv_allocated_len), page) - int(req.kv.cache_protected_len)
    if rule is HeldRule.KV_LENGTHS:  # req.kv is None once the request's KV is released
        kv = req.kv
        return 0 if kv is None else _ceil(int(kv.kv_allocated_len), page) - int(req.cache_protected_len)
    if rule is HeldRule.SEQLEN:
        # decode-side preallocation covers origin + outputs[:-1]; a chunk covers fill_ids
        outputs = max(len(req.output_ids) - 1, 0)
        allocated = len(req.fill_ids) if req is chunked else len(req.origin_input_ids) + outputs
        return allocated - length_of(req.prefix_indices)
    if req.kv_committed_freed:
        return 0
    protected = rule is HeldRule.ALLOCATED_PROTECTED
    tree_part = int(req.cache_protected_len) if protected else length_of(req.prefix_indices)
    return _ceil(int(req.kv_allocated_len), page) - tree_part


def _mamba_count(req: Any, shape: Shape, finished: bool | None = None) -> int:
    if shape.held_rule is HeldRule.REQ_KV:
        kv = req.kv
        total = int(kv.mamba_pool_idx.numel()) if kv.holds_mamba else 0
        return total + len(_ping_pong_held(kv))
    if req.mamba_pool_idx is None or (_finished(req) if finished is None else finished):
        return 0  # a finished request's pointer may be stale (donated to the tree)
    ping_pong = getattr(req, "mamba_ping_pong_track_buffer", None) if shape.has_ping_pong else None
    return 1 + (int(ping_pong.numel()) if ping_pong is not None else 0)


def _ping_pong_held(kv: Any) -> list[Any]:
    """The ping-pong track slots a ``req.kv`` record holds: the entries not marked empty (0.5.23's
    ``mamba_ping_pong_empty``), or the whole buffer where the record keeps no such marks (0.5.19 -
    0.5.20, whose own session count takes the buffer's ``numel()``)."""
    buffer = kv.mamba_ping_pong_track_buffer
    if buffer is None:
        return []
    empty = getattr(kv, "mamba_ping_pong_empty", None)
    if empty is None:
        return [buffer[i] for i in range(int(buffer.shape[0]))]
    return [buffer[i] for i, e in enumerate(list(empty)) if not e]


def mamba_slot_objects(req: Any, shape: Shape) -> list[Any]:
    """The tensors naming a live request's Mamba slots (for the census; read there, not here)."""
    if shape.held_rule is HeldRule.REQ_KV:
        kv = req.kv
        out = [kv.mamba_pool_idx] if kv.holds_mamba else []
        return out + _ping_pong_held(kv)
    if _finished(req) or req.mamba_pool_idx is None:
        return []
    ping_pong = getattr(req, "mamba_ping_pong_track_buffer", None) if shape.has_ping_pong else None
    return [req.mamba_pool_idx] + ([ping_pong] if ping_pong is not None else [])


def _guarded_int(reading: Reading, label: str, fn: Callable[..., int | bool], *args: Any) -> int:
    try:
        return int(fn(*args))
    except Exception as exc:
        reading.fail(label, exc)
        return 0


def _one(req: Any, shape: Shape, page: int, live: LiveSet) -> tuple[int, int, int]:
    """``(row, private full KV, Mamba slots)`` of one holder, in one pass."""
    finished = False if shape.held_rule is HeldRule.REQ_KV else _finished(req)
    mamba = _mamba_count(req, shape, finished)
    if not _holds_row(req, shape, live, finished):
        return 0, 0, mamba
    return 1, _full_private(req, shape, page, live.chunked), mamba


def _one_guarded(req: Any, shape: Shape, page: int, live: LiveSet, reading: Reading) -> tuple[int, int, int]:
    """The slow path after a failure: each figure on its own, so the failing one is named."""
    mamba = _guarded_int(reading, "req.mamba", _mamba_count, req, shape)
    if not _guarded_int(reading, "req.row", _holds_row, req, shape, live):
        return 0, 0, mamba
    return 1, _guarded_int(reading, "req.full", _full_private, req, shape, page, live.chunked), mamba


def holdings(
    live: LiveSet,
    shape: Shape,
    page: int,
    reading: Reading,
    *,
    full_exact: bool,
    memo: Memo | None = None,
) -> Holdings:
    """Rows, private full-KV slots and Mamba slots held by live requests (failures are noted).
    ``memo`` keeps what did not change from one sample to the next
    (:class:`~poolwatch.probe.sglang.totals.Memo`)."""
    try:
        ledger = Ledger() if memo is None else memo.ledger
        rows, full, mamba = ledger.totals(
            live.holders,
            live.chunked,
            shape,
            page,
            lambda req: _one(req, shape, page, live),
            live.ids,
            live.members,
        )
    except Exception:  # the careful path: each figure of each request on its own, failures named
        rows = full = mamba = 0
        for req in live.holders:
            try:
                r, f, m = _one(req, shape, page, live)
            except Exception:
                r, f, m = _one_guarded(req, shape, page, live, reading)
            rows, full, mamba = rows + r, full + f, mamba + m
    for req in live.waiting:
        try:
            mamba += _mamba_count(req, shape)
        except Exception as exc:
            reading.fail("req.mamba", exc)
    exact = full_exact and "req.full" not in reading.failures
    return Holdings(
        rows,
        full if exact else None,
        mamba,
        len(live.holders),
        swa=lambda: swa_held(live, shape, page, reading),
        session_mamba=reading.guard("sessions.mamba", lambda: _session_mamba(live), None),
    )


def _session_mamba(live: LiveSet) -> int:
    return sum(int(t.numel()) for _, record in live.sessions for t in mamba_ids(record))


def _swa_private(req: Any, shape: Shape, page: int, live: LiveSet) -> int:
    """Private sliding-window slots: the private full-KV range less what the window already freed
    (``ceil(allocated) - max(cache_protected_len, swa_evicted_seqlen)``)."""
    if not _holds_row(req, shape, live):
        return 0
    evicted = req.swa_evicted_seqlen if shape.held_rule is HeldRule.ALLOCATED_PROTECTED else _kv_evicted(req)
    freed = max(0, int(evicted) - int(req.cache_protected_len))
    return _full_private(req, shape, page, live.chunked) - freed


def _kv_evicted(req: Any) -> int:
    """0.5.17's SWA eviction cursor, in ``req.kv`` (none once released)."""
    return 0 if req.kv is None else int(req.kv.swa_evicted_seqlen)


def swa_held(live: LiveSet, shape: Shape, page: int, reading: Reading) -> int | None:
    """SWA slots held by live requests, on releases whose requests carry ``swa_evicted_seqlen``
    and ``kv_allocated_len``/``cache_protected_len`` (0.5.9 - 0.5.16; in ``req.kv`` 0.5.17 -
    0.5.18); ``None`` elsewhere."""
    if shape.held_rule not in (HeldRule.ALLOCATED_PROTECTED, HeldRule.KV_LENGTHS):
        return None
    try:
        return sum(_swa_private(req, shape, page, live) for req in live.holders)
    except Exception as exc:
        reading.fail("req.swa", exc)
        return None


def full_private_range(req: Any, shape: Shape, page: int, live: LiveSet) -> tuple[int, int, int] | None:
    """``(row, start, end)``: the columns of ``req_to_token[row]`` this live request owns
    privately, or ``None`` when it holds no row (the full-KV census reads these)."""
    if not _holds_row(req, shape, live):
        return None
    rule = shape.held_rule
    if rule is HeldRule.REQ_KV:
        start = int(req.kv.cache_protected_len)
    elif rule in (HeldRule.ALLOCATED_PROTECTED, HeldRule.KV_LENGTHS):
        start = int(req.cache_protected_len)
    else:
        start = length_of(req.prefix_indices)
    row = req.kv.req_pool_idx if rule is HeldRule.REQ_KV else req.req_pool_idx
    return int(row), start, start + _full_private(req, shape, page, live.chunked)
