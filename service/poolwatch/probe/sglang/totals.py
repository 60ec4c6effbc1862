"""The holders' totals at C speed: rows, private full-KV slots and Mamba slots of every live request.

The same figures as the per-request rules in :mod:`poolwatch.probe.sglang.footprint` (``_one``), read one
attribute at a time over the whole holder list with ``map``/``operator``/``itertools.compress``,
so no Python frame runs per request except SGLang's own ``Req.finished()`` (a one-line method in
every release read).  Booleans combine at C speed: ``has_pointer > finished`` is "holds it and is
not finished".  Anything unexpected (a request without an attribute, an odd value) raises, and the
caller falls back to the careful per-request path, which names the failure.

What changes between samples is mostly the decode requests' ``output_ids`` and allocation counts;
those are read every time (a list's ``len()`` or a Python int, no GPU synchronisation).  What
does not change for the life of an object is remembered: a prefix tensor's length is kept by the
tensor's identity (the cache holds the tensor, so its ``id`` cannot be reused while cached;
SGLang replaces ``prefix_indices`` with a new tensor, it never resizes one in place), so it is
computed once per tensor instead of once per sample (``Tensor.__len__`` is a Python-level call).

Cost at 256 live requests: some tens of microseconds, against ~230 µs for the per-request loop.
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from poolwatch.probe.sglang.host_census import HostReader
from poolwatch.probe.sglang.shapes import HeldRule, Shape

__all__ = ["Memo", "fast_totals", "length_of", "mamba_holders", "same_items"]

_FINISHED = operator.methodcaller("finished")
_ROW = operator.attrgetter("req_pool_idx")
_MAMBA = operator.attrgetter("mamba_pool_idx")
_OUTPUT = operator.attrgetter("output_ids")
_ORIGIN = operator.attrgetter("origin_input_ids")
_FILL = operator.attrgetter("fill_ids")
_PREFIX = operator.attrgetter("prefix_indices")
_FREED = operator.attrgetter("kv_committed_freed")
_ALLOCATED = operator.attrgetter("kv_allocated_len")
_PROTECTED = operator.attrgetter("cache_protected_len")
_KV = operator.attrgetter("kv")
_NUMEL = operator.methodcaller("numel")
_REASON = operator.attrgetter("finished_reason")
_NONE = itertools.repeat(None)


def _reference_finished(self: Any) -> bool:  # SGLang's Req.finished in every release read
    return self.finished_reason is not None


@functools.lru_cache(maxsize=16)
def _plain_finished(cls: type) -> bool:
    """Whether ``cls.finished`` is exactly ``return self.finished_reason is not None`` (same
    bytecode, names and constants), so reading the attribute gives what calling it would."""
    code = getattr(getattr(cls, "finished", None), "__code__", None)
    ref = _reference_finished.__code__
    return code is not None and (code.co_code, code.co_names, code.co_consts, code.co_argcount) == (
        ref.co_code,
        ref.co_names,
        ref.co_consts,
        ref.co_argcount,
    )


def _finished_sources(holders: Sequence[Any], plain: bool | None = None) -> tuple[list[Any], bool]:
    """``(finished_reason of each holder, True)`` when every holder's class has the plain
    ``finished()`` (read at C speed, no Python frame per request), else ``(finished(), False)``.
    ``plain``: already known for these very holders."""
    if plain is None:
        plain = all(map(_plain_finished, set(map(type, holders))))
    if plain:
        return list(map(_REASON, holders)), True
    return list(map(bool, map(_FINISHED, holders))), False


def mamba_holders(reqs: Sequence[Any]) -> list[Any]:
    """The requests whose ``mamba_pool_idx`` names a slot they hold: set and not finished (a
    finished request's pointer may be stale, its slot donated to the tree); before 0.5.23."""
    sources, plain = _finished_sources(reqs)
    done = list(map(operator.is_not, sources, _NONE)) if plain else sources
    has_mamba = map(operator.is_not, map(_MAMBA, reqs), _NONE)
    return list(itertools.compress(reqs, map(operator.gt, has_mamba, done)))


def same_items(a: Sequence[Any], b: Sequence[Any]) -> bool:
    """The same objects in the same order (identity, C speed)."""
    return len(a) == len(b) and all(map(operator.is_, a, b))


@dataclass(frozen=True, slots=True)
class _Pointers:
    """Who holds a row and who a Mamba slot, and the objects that decided it."""

    holders: Sequence[Any]  # a tuple as given (immutable), else a copy
    key: tuple[list[Any], ...]  # row and Mamba pointers, finished sources, chunked, chunk_ran
    plain: bool  # the holders' finished() is the plain one
    rows: list[Any]
    chunk_in: bool
    mamba_holders: list[Any]


def _pointers(holders: Sequence[Any], chunked: Any, chunk_ran: bool, shape: Shape, memo: Memo) -> _Pointers:
    """Row and Mamba holders; the last sample's when every object that decides them is the same
    (identity, C speed: a pointer is reassigned, never changed in place, when a slot moves)."""
    last = memo.pointers
    same_holders = last is not None and (holders is last.holders or same_items(holders, last.holders))
    sources, plain = _finished_sources(holders, last.plain if last is not None and same_holders else None)
    row_pointers, mamba_pointers = list(map(_ROW, holders)), list(map(_MAMBA, holders))
    key = (row_pointers, mamba_pointers, sources, [chunked], [chunk_ran])
    if last is not None and same_holders and all(map(same_items, key, last.key)):
        return last
    done = list(map(operator.is_not, sources, _NONE)) if plain else sources
    has_mamba = map(operator.is_not, mamba_pointers, _NONE)
    mamba_holders = list(itertools.compress(holders, map(operator.gt, has_mamba, done)))
    has_row = map(operator.is_not, row_pointers, _NONE)
    cleared = shape.row_pointer_cleared
    rows = list(itertools.compress(holders, has_row if cleared else map(operator.gt, has_row, done)))
    chunk_in = chunked is not None and any(map(operator.is_, rows, itertools.repeat(chunked)))
    if chunk_in and not cleared and not chunk_ran:  # its row was freed at the chunk boundary
        rows, chunk_in = [r for r in rows if r is not chunked], False
    kept = holders if isinstance(holders, tuple) else list(holders)
    memo.pointers = _Pointers(kept, key, plain, rows, chunk_in, mamba_holders)
    return memo.pointers


def length_of(seq: Any) -> int:
    """``len()`` of a list or a tensor (a tensor's shape is on the host: no GPU sync)."""
    shape = getattr(seq, "shape", None)
    return int(shape[0]) if shape is not None else len(seq)


class Memo:
    """What one sample's totals keep for the next: prefix-tensor lengths by identity, and who
    held a row or a Mamba slot (:func:`_pointers`).

    Only objects with a ``shape`` (tensors) are remembered; a list's length can change in place
    and costs a C-level ``len()`` anyway.  Tensors no longer in use are forgotten once the cache
    holds twice as many as the call was given, so it stays proportional to the live requests."""

    def __init__(self) -> None:
        self._known: dict[int, tuple[Any, int]] = {}
        self._last: tuple[list[Any], int] = ([], 0)  # the tensors of the last call and their total
        self.pointers: _Pointers | None = None
        self.groups: tuple[list[Any], dict[int, Any], tuple[Any, ...]] | None = None  # requests.collect_live
        self.host = HostReader()  # the HiCache host account, walked within its budget

    def total(self, objs: Iterable[Any]) -> int:
        """The summed lengths of ``objs``: the last call's total when it was given the very same
        tensors (identity, C speed), else each tensor's remembered length (lists: ``len()``)."""
        seqs = list(objs)
        last, last_total = self._last
        if len(seqs) == len(last) and all(map(operator.is_, seqs, last)):
            return last_total
        total, tensors = self._sum(seqs)
        if tensors:  # lists may change length in place
            self._last = (seqs, total)
        return total

    def _sum(self, seqs: list[Any]) -> tuple[int, bool]:
        """The summed lengths, and whether every sequence was a tensor (only tensors are
        remembered: a sequence found in ``_known`` is one, and is not looked at again)."""
        ids = list(map(id, seqs))
        known = self._known
        entries: list[tuple[Any, int] | None] = list(map(known.get, ids))
        missing = list(itertools.compress(range(len(entries)), map(operator.is_, entries, _NONE)))
        tensors = self._learn(seqs, ids, entries, missing) if missing else True
        if len(known) > 2 * len(seqs) + 64:  # forget the tensors no longer in use
            self._known = {k: e for k, e in zip(ids, entries, strict=True) if e and hasattr(e[0], "shape")}
        return sum(map(operator.itemgetter(1), entries)), tensors  # type: ignore[arg-type]

    def _learn(
        self, seqs: list[Any], ids: list[int], entries: list[tuple[Any, int] | None], missing: list[int]
    ) -> bool:
        """The lengths of the sequences not seen before (tensors at C speed, then remembered);
        whether they all were tensors."""
        fresh = list(map(seqs.__getitem__, missing))
        shapes: list[Any] = list(map(getattr, fresh, itertools.repeat("shape"), _NONE))
        tensors = not any(map(operator.is_, shapes, _NONE))
        if not tensors:  # lists among them: one at a time, not remembered
            found = [(seq, length_of(seq)) for seq in fresh]
        else:
            found = list(zip(fresh, map(int, map(operator.itemgetter(0), shapes)), strict=True))
            self._known.update(zip(map(ids.__getitem__, missing), found, strict=True))
        for i, entry in zip(missing, found, strict=True):
            entries[i] = entry
        return tensors

    def __len__(self) -> int:
        return len(self._known)


def _ceil_all(values: Iterable[int], page: int) -> Iterable[int]:
    """``-(-n // page) * page`` of each value, at C speed (``page == 1``: the values)."""
    if page <= 1:
        return values
    negated = map(operator.floordiv, map(operator.neg, values), itertools.repeat(page))
    return map(operator.mul, map(operator.neg, negated), itertools.repeat(page))


def _ping_pong(holders: Sequence[Any]) -> int:
    """Ping-pong track slots (0.5.9+ ``extra_buffer``) of the Mamba holders."""
    attr = itertools.repeat("mamba_ping_pong_track_buffer")
    buffers = [b for b in map(getattr, holders, attr, _NONE) if b is not None]
    return sum(map(int, map(_NUMEL, buffers)))


def _seqlen_full(rows: list[Any], chunked: Any, chunk_in: bool, memo: Memo) -> int:
    """0.5.4: ``len(origin) + max(len(outputs) - 1, 0) - len(prefix)``; the chunked request's
    allocation is its ``fill_ids``."""
    plain = [r for r in rows if r is not chunked] if chunk_in else rows
    outputs = list(map(len, map(_OUTPUT, plain)))
    full = sum(map(len, map(_ORIGIN, plain))) + sum(outputs) - (len(outputs) - outputs.count(0))
    full -= memo.total(map(_PREFIX, plain))
    if chunk_in:
        full += len(chunked.fill_ids) - length_of(chunked.prefix_indices)
    return full


def _allocated_full(rows: list[Any], rule: HeldRule, page: int, memo: Memo) -> int:
    """0.5.5.post3+: ``ceil(kv_allocated_len) - tree part`` of the rows not already freed (0.5.17:
    the allocated length in ``req.kv``; a row holder's record is never ``None``)."""
    if rule is HeldRule.KV_LENGTHS:
        allocated = sum(_ceil_all(map(int, map(_ALLOCATED, map(_KV, rows))), page))
        return allocated - sum(map(int, map(_PROTECTED, rows)))
    kept = list(itertools.compress(rows, map(operator.not_, map(_FREED, rows))))
    allocated = sum(_ceil_all(map(int, map(_ALLOCATED, kept)), page))
    if rule is HeldRule.ALLOCATED_PROTECTED:
        return allocated - sum(map(int, map(_PROTECTED, kept)))
    return allocated - memo.total(map(_PREFIX, kept))


def fast_totals(
    holders: Sequence[Any], chunked: Any, chunk_ran: bool, shape: Shape, page: int, memo: Memo
) -> tuple[int, int, int]:
    """``(rows, private full KV, Mamba slots)`` of ``holders`` (releases before 0.5.23's
    ``req.kv``).  Raises on anything unexpected; the caller then takes the careful path."""
    rule = shape.held_rule
    if rule is HeldRule.REQ_KV:
        raise TypeError("req.kv releases are summed per request")
    held = _pointers(holders, chunked, chunk_ran, shape, memo)
    mamba = len(held.mamba_holders) + (_ping_pong(held.mamba_holders) if shape.has_ping_pong else 0)
    if rule is HeldRule.SEQLEN:
        full = _seqlen_full(held.rows, chunked, held.chunk_in, memo)
    else:
        full = _allocated_full(held.rows, rule, page, memo)
    return len(held.rows), full, mamba
