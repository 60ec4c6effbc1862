"""What a sample reads of each live request for the ledger (:mod:`poolwatch.probe.sglang.ledger`),
at C speed: the fields that decide its figures (its *signal*) and its growing length, each request
fetched once; and the two facts about SGLang's classes the ledger leans on (a plain ``finished()``,
a page's ceiling).

The seam: this module knows each release family's field names and how to read them in bulk; the
ledger knows what to keep from one sample to the next.
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Iterable, Sequence
from typing import Any

from poolwatch.probe.sglang.shapes import HeldRule, Shape

__all__ = ["SIGNALS", "Growth", "ceil_all", "plain_finished", "read"]

_POINTERS = ("finished_reason", "req_pool_idx", "mamba_pool_idx")
SIGNALS: dict[HeldRule, tuple[str, ...]] = {
    HeldRule.SEQLEN: (*_POINTERS, "prefix_indices", "origin_input_ids"),
    HeldRule.ALLOCATED_PREFIX: (*_POINTERS, "kv_committed_freed", "prefix_indices"),
    HeldRule.ALLOCATED_PROTECTED: (*_POINTERS, "kv_committed_freed", "cache_protected_len"),
    HeldRule.KV_LENGTHS: (*_POINTERS, "kv", "cache_protected_len"),
    HeldRule.REQ_KV: (
        "kv",
        "kv.holds_kv",
        "kv.cache_protected_len",
        "kv.holds_mamba",
        "kv.mamba_pool_idx",
        "kv.mamba_ping_pong_track_buffer",
    ),
}
_PING_PONG = "mamba_ping_pong_track_buffer"


def read(holders: Sequence[Any], shape: Shape, page: int) -> tuple[list[tuple[Any, ...]], Growth]:
    """Each holder's signal and growth, at C speed: the one cold pass over the requests (0.5.4's
    growing output list rides in its signal: the same list object, grown in place; 0.5.23's fields
    are read from each ``req.kv`` record fetched once; the ping-pong buffer read apart, with a
    default: a request may have none)."""
    rule = shape.held_rule
    if rule is HeldRule.SEQLEN:
        signals = list(map(_SEQLEN_READ, holders))
        return signals, Growth(list(map(len, map(_LAST, signals))), rule, page)
    if rule is HeldRule.REQ_KV:
        records = list(map(_KV, holders))
        signals = list(map(operator.add, zip(records), map(_REQ_KV_READ, records)))
        return signals, Growth(list(map(_ALLOCATED, records)), rule, page)
    signals = list(map(operator.attrgetter(*SIGNALS[rule]), holders))
    if shape.has_ping_pong:
        buffers = map(getattr, holders, itertools.repeat(_PING_PONG), itertools.repeat(None))
        signals = list(map(operator.add, signals, zip(buffers)))  # (zip: one-tuples at C speed)
    if rule is HeldRule.KV_LENGTHS:  # 0 where req.kv is gone
        kvs = map(_KV, holders)
        grown = list(map(getattr, kvs, itertools.repeat("kv_allocated_len"), itertools.repeat(0)))
    else:
        grown = list(map(_ALLOCATED, holders))
    return signals, Growth(grown, rule, page)


_KV = operator.attrgetter("kv")
_ALLOCATED = operator.attrgetter("kv_allocated_len")
_LAST = operator.itemgetter(-1)
_SEQLEN_READ = operator.attrgetter(*SIGNALS[HeldRule.SEQLEN], "output_ids")
_REQ_KV_READ = operator.attrgetter(*(name.removeprefix("kv.") for name in SIGNALS[HeldRule.REQ_KV][1:]))


class Growth:
    """Each holder's growing length, as read: ``len(output_ids)`` (0.5.4, whose decode-side
    allocation is ``max(len - 1, 0)``), else ``kv_allocated_len`` ceiled to the page; summed whole,
    or over a selection, without a list of the per-holder figures."""

    def __init__(self, values: list[int], rule: HeldRule, page: int) -> None:
        self.seqlen = rule is HeldRule.SEQLEN
        self.values = values if page <= 1 or self.seqlen else list(ceil_all(values, page))

    def of(self, i: int) -> int:
        value = self.values[i]
        return max(value - 1, 0) if self.seqlen else int(value)

    def total(self, selected: list[bool] | None = None) -> int:
        """The sum (``selected``: over these holders only)."""
        values = self.values if selected is None else list(itertools.compress(self.values, selected))
        total = sum(values)
        if self.seqlen:  # each max(len - 1, 0): less one for each non-empty output
            total -= len(values) - values.count(0)
        return int(total)


def _reference_finished(self: Any) -> bool:  # SGLang's Req.finished in every release read
    return self.finished_reason is not None


@functools.lru_cache(maxsize=16)
def plain_finished(cls: type) -> bool:
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


def ceil_all(values: Iterable[int], page: int) -> Iterable[int]:
    """``-(-n // page) * page`` of each value, at C speed (``page == 1``: the values)."""
    if page <= 1:
        return values
    negated = map(operator.floordiv, map(operator.neg, values), itertools.repeat(page))
    return map(operator.mul, map(operator.neg, negated), itertools.repeat(page))
