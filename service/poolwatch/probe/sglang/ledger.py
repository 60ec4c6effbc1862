"""The live requests' holdings kept by identity between samples: each request's figures are
recomputed only when what decides them changed.

What a live request holds (a row, private full-KV slots, Mamba slots) is decided by a few of its
fields (:mod:`poolwatch.probe.sglang.footprint`'s per-request rules).  All but one of them change
only when the request moves (admitted, chunked, finished, freed, retracted): its row and Mamba
pointers, its prefix or protected length, its ``req.kv`` record, its finished reason.  The one that
changes at every decode step is its length: ``len(output_ids)`` up to 0.5.4, ``kv_allocated_len``
from 0.5.5.post3 (in ``req.kv`` from 0.5.17).  So a request's private full KV is kept as a
*static* part plus its *growth* (that length, ceiled to the page where the release allocates in
pages), and a sample reads, for every live request and at C speed (``map`` over the holders, no
Python frame per request):

* the **signal**: every field that decides the static part, in one tuple, compared with the last
  sample's by ``==`` -- identity first, so an unchanged field costs no comparison; a new object equal
  to the old one (the same row index, an equal prefix) decides the same figures; a tensor whose
  comparison cannot say falls back to identity.  SGLang reassigns these fields, it never changes
  them in place (a prompt, a prefix, a pointer), and
* the **growth**: that one length.

Requests whose signal matches the last sample's keep their static part and their row and Mamba
counts; the others (new, moved, or *volatile*: the chunked request, whose row and length follow
its chunk, and a record whose ping-pong marks change in place) are recomputed by the per-request
rule itself.  The totals are then three sums over the kept figures and one over the growth.  The
objects whose identity a signal names are kept until the next sample, so an identity cannot be
reused by a new object in between.

Exactness: a request's figures equal the per-request rule's whenever its signal is unchanged, since
the rule reads nothing else (``tests/probe/sglang/test_ledger.py`` checks this against a
from-scratch recomputation over randomized runs with aborts, retractions, chunks and PD queues).
Cost: one pass over the live requests for the signal (the one that brings them into the cache; on
0.5.4 it carries the growing output list too, on 0.5.23 it reads each ``req.kv`` record once), a warm
one for the growth elsewhere, and a few over ids (the live set's, when it has them) and kept
signals; one per-request rule call per request that moved.  Parked sessions' slots are counted
apart (:mod:`poolwatch.probe.sglang.sessions`).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from poolwatch.probe.sglang.shapes import HeldRule, Shape
from poolwatch.probe.sglang.signals import plain_finished, read

__all__ = ["Ledger", "Rule"]

# one request's (row, private full KV, Mamba slots) by the per-request rule (footprint._one)
Rule = Callable[[Any], tuple[int, int, int]]


@dataclass(frozen=True, slots=True)
class _Kept:
    """One request's figures as last computed: its growth is added to ``static`` when ``grows``."""

    rows: int
    static: int
    mamba: int
    grows: bool


_NOTHING = _Kept(0, 0, 0, False)


class Ledger:
    """Each live request's holdings by identity (see the module docstring)."""

    def __init__(self) -> None:
        self._reset(0, None)
        self.recomputed = 0  # requests recomputed by the per-request rule, over the ledger's life

    def _reset(self, page: int, shape: Shape | None) -> None:
        self._signals: dict[int, tuple[Any, ...]] = {}  # by the request's id (the request is pinned)
        self._kept: dict[int, _Kept] = {}
        self._still: set[int] = set()  # the requests whose private KV does not follow their growth
        self._odd: set[int] = set()  # the requests whose class's finished() is not SGLang's plain one
        self._sums = [0, 0, 0]  # rows, static full KV, Mamba slots of the kept requests
        self._pins: tuple[Any, ...] = ()  # the last holders and signals (their ids stay theirs)
        self._page, self._shape = page, shape
        self._chunked: Any = None  # the last sample's chunked request (recomputed when it is no longer)

    def totals(
        self,
        holders: Sequence[Any],
        chunked: Any,
        shape: Shape,
        page: int,
        rule: Rule,
        ids: Sequence[int] | None = None,
        members: AbstractSet[int] | None = None,
    ) -> tuple[int, int, int]:
        """``(rows, private full KV, Mamba slots)`` of ``holders``, as ``rule`` gives them one by
        one (``ids``: ``id()`` of each holder, and ``members`` the same as a set, when the caller
        has them already).  Raises on anything unexpected (the caller then takes its careful path)."""
        if page != self._page or shape is not self._shape:
            self._reset(page, shape)
        signals, growth = read(holders, shape, page)
        ids = list(map(id, holders)) if ids is None else ids
        kept = list(map(self._signals.get, ids))
        if len(self._signals) > len(ids) - kept.count(None):  # some kept requests are gone
            for key in self._signals.keys() - (set(ids) if members is None else members):
                self._forget(key)
                self._odd.discard(key)
        stale = self._stale(ids, signals, kept, holders, chunked, shape)
        for i in stale:  # (each kept with its signal at once: a rule that raises leaves no stray figure)
            self._forget(ids[i])
            self._keep(ids[i], self._fresh(holders[i], growth.of(i), chunked, shape, rule))
            self._signals[ids[i]] = signals[i]
        self._pins = (holders, signals, chunked)
        grown = growth.total()
        if self._still:
            grown -= growth.total(list(map(self._still.__contains__, ids)))
        rows, static, mamba = self._sums
        return rows, static + grown, mamba

    def _stale(
        self,
        ids: Sequence[int],
        signals: list[tuple[Any, ...]],
        kept: list[tuple[Any, ...] | None],
        holders: Sequence[Any],
        chunked: Any,
        shape: Shape,
    ) -> list[int]:
        """The holders to recompute: new, moved (a signal not equal to the kept one), or volatile."""
        indices = range(len(ids))
        try:
            stale = list(itertools.compress(indices, map(operator.ne, signals, kept)))
        except Exception:  # a tensor compared with another of other contents: by identity instead
            stale = list(itertools.compress(indices, map(operator.not_, map(_identical, signals, kept))))
        if shape.held_rule is not HeldRule.REQ_KV:  # (0.5.23's rule reads no finished())
            self._odd.update(ids[i] for i in stale if not _plain(holders[i]))
            if self._odd:  # a holder's finished() is not a field the signal names: every one, each time
                self._chunked = chunked
                return list(indices)
        chunks = {id(chunked), id(self._chunked)} - {id(None)}  # the chunked request, and the last one
        self._chunked = chunked
        extra = [i for i in map(_position(ids), chunks) if i is not None]
        if shape.held_rule is HeldRule.REQ_KV:
            buffers = map(operator.itemgetter(-1), signals)
            extra += itertools.compress(indices, map(operator.is_not, buffers, itertools.repeat(None)))
        return sorted(set(stale).union(extra)) if extra else stale

    def _fresh(self, req: Any, growth: int, chunked: Any, shape: Shape, rule: Rule) -> _Kept:
        """One request by the per-request rule; its static part is the rule's less its growth."""
        self.recomputed += 1
        rows, full, mamba = rule(req)
        grows = bool(rows) and _grows(req, chunked, shape.held_rule)
        return _Kept(rows, full - growth if grows else full, mamba, grows)

    def _keep(self, key: int, kept: _Kept) -> None:
        self._kept[key] = kept
        self._sums = [self._sums[0] + kept.rows, self._sums[1] + kept.static, self._sums[2] + kept.mamba]
        if not kept.grows:
            self._still.add(key)

    def _forget(self, key: int) -> None:
        kept = self._kept.pop(key, _NOTHING)
        self._signals.pop(key, None)
        self._still.discard(key)
        self._sums = [self._sums[0] - kept.rows, self._sums[1] - kept.static, self._sums[2] - kept.mamba]


def _identical(a: tuple[Any, ...], b: tuple[Any, ...] | None) -> bool:
    return b is not None and len(a) == len(b) and all(map(operator.is_, a, b))


def _plain(req: Any) -> bool:
    cls: type = type(req)
    return plain_finished(cls)


def _position(ids: Sequence[int]) -> Callable[[int], int | None]:
    """``ids.index`` as a function that answers None for an id not there (C speed, no request read)."""

    def find(key: int) -> int | None:
        try:
            return ids.index(key)
        except ValueError:
            return None

    return find


def _grows(req: Any, chunked: Any, rule: HeldRule) -> bool:
    """Whether a row holder's private KV is its growth plus a static part (the chunked request's
    follows its chunk; a request whose KV is already freed, or whose record is gone, holds none)."""
    if rule is HeldRule.SEQLEN:
        return req is not chunked
    if rule is HeldRule.KV_LENGTHS:
        return req.kv is not None
    if rule is HeldRule.REQ_KV:
        return True
    return not req.kv_committed_freed
