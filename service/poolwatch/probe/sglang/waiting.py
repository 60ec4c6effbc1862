"""Waiting requests holding a copy-on-write Mamba slot, without walking the waiting queue every sample.

A waiting request may hold one Mamba slot (taken while it was considered for scheduling and
not admitted, reference §3.2); nothing else in the waiting queue holds anything.  Finding those
few means looking at every waiting request, and a queue can be thousands long, so the cheap
sample does not do it every time.  :class:`WaitingHolders` remembers the holders the last
*exact scan* found (by weak reference where the request allows it, so a request dropped from the
queue and forgotten by the scheduler is forgotten here too) and the cheap sample recalls them,
O(holders), instead of walking the queue.  Recalling is exact unless the queue changed under it:

* a waiting request took a slot since the scan: the Mamba pool then shows a deficit, and a
  deficit (or any gap) found with recalled holders is never published: the sample scans the
  queue exactly and computes again (``snapshot.take_sample``), so **a published gap always
  comes from an exact scan** (no false gaps);
* a remembered holder was admitted: it is a holder now and counted there once (deduplicated
  by identity); one whose slot was given back (pointer cleared) or that finished counts 0;
* a remembered holder left the queue *keeping* its slot (an abort that leaks it) while
  something still references it: recalled, it would still count as held, hiding that leak until
  the next exact scan.  Exact scans run at every sample of SGLang's idle hook, whenever the
  queue is short (``EXACT_BELOW``), and at least once per Mamba census interval (the census
  reads every slot anyway), so such a leak is named within one census interval and always
  before SGLang's own idle check judges the pool.

The scan itself picks the holders out at C speed (``operator.attrgetter`` with
``itertools.compress``), some tens of nanoseconds per waiting request.
"""

from __future__ import annotations

import itertools
import operator
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from poolwatch.probe.sglang.shapes import HeldRule, Shape

__all__ = ["EXACT_BELOW", "WaitingHolders", "maybe_holding"]

EXACT_BELOW = 64  # a queue this short is scanned on every sample (a few microseconds)


def maybe_holding(queue: Iterable[Any], shape: Shape | None) -> list[Any]:
    """The waiting requests that may hold a Mamba slot, picked out at C speed; all of them when
    the release is unknown or a request lacks the attribute (the careful path then names it)."""
    if shape is None:
        return list(queue)
    try:
        if shape.held_rule is HeldRule.REQ_KV:
            return list(itertools.compress(queue, map(operator.attrgetter("kv.holds_mamba"), queue)))
        marks = map(
            operator.is_not, map(operator.attrgetter("mamba_pool_idx"), queue), itertools.repeat(None)
        )
        return list(itertools.compress(queue, marks))
    except Exception:
        return list(queue)


def _ref(req: Any) -> Callable[[], Any]:
    try:
        return weakref.ref(req)
    except TypeError:  # a request type without weak references: keep it (recall checks it anyway)
        return lambda: req


class WaitingHolders:
    """The waiting Mamba holders found by the last exact scan, for the cheap samples between scans;
    a queue shorter than ``exact_below`` is always scanned."""

    def __init__(self, exact_below: int = EXACT_BELOW) -> None:
        self.exact_below = exact_below
        self._refs: list[Callable[[], Any]] = []
        self.scanned = False  # no recall before the first exact scan
        self.scans = 0

    def scan(self, queue: Iterable[Any], shape: Shape | None) -> list[Any]:
        """Every waiting request that may hold a slot (a walk of the queue, at C speed)."""
        found = maybe_holding(queue, shape)
        self._refs = [_ref(r) for r in found]
        self.scanned = True
        self.scans += 1
        return found

    def recall(self) -> list[Any]:
        """The holders of the last scan still alive (O(holders); the queue is not read)."""
        return [r for r in (ref() for ref in self._refs) if r is not None]
