"""What streaming sessions hold between turns: a finished turn's row, private KV and Mamba slots,
kept by the session's slot for the next turn (0.5.10+, ``--enable-streaming-session``).

A session slot is a holder the live requests do not list, so the identity censuses take its ids
as owned (``session:<id>``), as SGLang's own checks count them as ``session_held``:

* 0.5.10's ``SessionAwareCache`` and 0.5.11 - 0.5.18's ``StreamingSession`` (wrapped round the
  tree) keep ``slots`` (session id -> ``SessionSlot``) whose fields are a request's:
  ``req_pool_idx``, ``cache_protected_len``, ``kv_allocated_len``, ``mamba_pool_idx``,
  ``mamba_ping_pong_track_buffer``;
* 0.5.19 - 0.5.22 keep the same fields in the slot's ``kv`` (a ``ReqKvInfo``);
* 0.5.23's tree says which records its sessions own (``session_records()``: session id ->
  ``ReqKvInfo``).

A slot whose row a live request holds (the next turn runs on it) is the request's while it runs:
SGLang leaves it out of ``session_held`` (``active_pool_idxs``), and so do the censuses, which
read it through the request.  Cost: one Python step per open session (a census runs at a low rate).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["Parked", "kv_span", "mamba_ids", "parked_sessions"]

Parked = tuple[tuple[str, Any], ...]  # (owner name "session:<id>", the slot's record)


def _records(tree_cache: Any) -> list[tuple[str, Any]]:
    """``(session id, record)`` of every session slot of ``tree_cache`` (none without sessions)."""
    records = getattr(tree_cache, "session_records", None)
    if callable(records):
        return [(str(sid), kv) for sid, kv in dict(records()).items()]
    slots = getattr(tree_cache, "slots", None)
    if not isinstance(slots, dict) or not callable(getattr(tree_cache, "release_session", None)):
        return []
    return [(str(sid), getattr(slot, "kv", slot)) for sid, slot in slots.items()]


def _row(record: Any) -> int | None:
    row = getattr(record, "req_pool_idx", None)
    return None if row is None else int(row)


def _holder_row(req: Any) -> int | None:
    kv = getattr(req, "kv", None)
    row = getattr(kv, "req_pool_idx", None) if kv is not None else None
    return _row(req) if row is None else int(row)


def parked_sessions(tree_cache: Any, holders: Iterable[Any]) -> Parked:
    """The session slots that hold something none of the live ``holders`` runs on."""
    records = _records(tree_cache)
    if not records:
        return ()
    running = {row for row in map(_holder_row, holders) if row is not None}
    out = []
    for sid, record in records:
        row = _row(record)
        if row is not None and row in running:
            continue
        if row is not None or mamba_ids(record):
            out.append((f"session:{sid}", record))
    return tuple(out)


def kv_span(record: Any, page: int) -> tuple[int, int, int] | None:
    """``(row, start, end)``: the columns of ``req_to_token[row]`` the slot owns privately
    (``cache_protected_len`` up to ``kv_allocated_len`` rounded up to a page), or ``None``."""
    row = _row(record)
    if row is None:
        return None
    allocated = int(record.kv_allocated_len)
    end = -(-allocated // page) * page if page > 1 else allocated
    return row, int(record.cache_protected_len), end


def mamba_ids(record: Any) -> list[Any]:
    """The tensors naming the slot's Mamba slots: its working slot and its ping-pong track slots
    (those not marked empty where the record keeps such marks, 0.5.23)."""
    out = []
    working = getattr(record, "mamba_pool_idx", None)
    if working is not None:
        out.append(working.reshape(-1))
    buffer = getattr(record, "mamba_ping_pong_track_buffer", None)
    if buffer is not None:
        empty = getattr(record, "mamba_ping_pong_empty", None)
        flat = buffer.reshape(-1)
        if empty is None:
            out.append(flat)
        else:
            out += [flat[i : i + 1] for i, e in enumerate(list(empty)) if not e]
    return out
