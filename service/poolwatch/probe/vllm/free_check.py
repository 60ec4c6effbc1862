"""The free-time tripwire: a look at each list handed to ``BlockPool.free_blocks``, before it runs.

vLLM's ``free_blocks`` checks nothing.  What this free will do wrong is visible at the free itself,
before any block it returns can be handed to another request, for about the cost of the free:

* ``negative_ref``: a block freed with ``ref_cnt <= 0`` (a double free; vLLM asserts only when a
  later allocation pops it);
* ``ref_below_owners``: a block this free would leave with fewer references than its owners still
  naming it -- listed more often in this one free than it has references (vLLM #42571), or a
  request's blocks freed twice while they are shared with another request (prefix caching: the
  shared blocks only drop from 2 to 1, or from 1 to 0 and go back to the free queue while the other
  request still lists them, and vLLM never asserts), or freed while their own request, or a deferred
  free, still holds them (a premature free; the #45357 class).

The owners are the lists of the incremental :class:`~poolwatch.probe.vllm.holders.HolderIndex`,
which a request's own pop updates first (the wrapped ``pop_blocks_for_free``/``free``: its
occurrences stop owning, and its blocks are *expected* at a free), plus the owners beside the lists
(``side``: the deferred frees, pending copy-on-write pairs and tail pins, read at each free:
usually none).  A free that no pop announced -- a stale or copied table, a connector's release, a
premature free --, that lists a block twice, or that frees a block a side owner still holds (a
deferred entry freed early: its pop announced it) is judged against the lists as they are at that
moment (``resync``: the lists appended since the last sample read first), so the owners counted
are exact; a free fully announced is judged against the lists last counted (those new since the
last sample may own more: never a false finding).  Read-only: the list is looked at, never changed
(guard mode acts on the findings: :mod:`~poolwatch.probe.vllm.refuse`).  Lists of the managers read
afresh at each sample (sliding window, Mamba) are not counted here: a premature free of a block
only such a list holds is named by the next walk, not at the free.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from itertools import repeat
from operator import add, attrgetter, sub
from typing import Any

from poolwatch.probe.vllm.holders import HolderIndex

__all__ = ["free_findings"]

_ID = attrgetter("block_id")
_REF = attrgetter("ref_cnt")


def _short(
    blocks: Sequence[Any],
    ids: list[int],
    index: HolderIndex,
    times: list[int] | None,
    side: Mapping[int, int],
    refs: list[int] | None = None,
) -> list[int]:
    """Positions of ``blocks`` (distinct) that this free leaves below their owners: each freed
    ``times[k]`` times (once when ``times`` is None); ``refs``: their ``ref_cnt``, when read already.
    The sound case is C-level passes (``map`` over the counts' ``get``), no Python loop per block."""
    refs = list(map(_REF, blocks)) if refs is None else refs
    live, transfer = index.counts["live"], index.counts["transfer"]
    owners = list(map(live.get, ids, repeat(0)))
    if transfer:
        owners = list(map(add, owners, map(transfer.get, ids, repeat(0))))
    if side:
        owners = list(map(add, owners, map(side.get, ids, repeat(0))))
    spare = list(map(sub, refs, owners))  # references beyond the owners that still name the block
    sound = min(spare, default=1) > 0 if times is None else min(map(sub, spare, times), default=0) >= 0
    if sound:
        return []  # every block keeps a reference for each owner left (the sound free)
    null_id = index.null_id
    if times is None:
        return [k for k, left in enumerate(spare) if left < 1 and ids[k] != null_id]
    return [k for k, (left, n) in enumerate(zip(spare, times, strict=True)) if left < n and ids[k] != null_id]


def free_findings(
    blocks: Sequence[Any],
    index: HolderIndex | None = None,
    resync: Callable[[], object] | None = None,
    side: Mapping[int, int] | None = None,
) -> dict[str, tuple[int, ...]]:
    """``{kind: block ids}`` this free will corrupt (empty when the free is sound); ``side``: the
    occurrences of blocks in owners beside the lists
    (:func:`~poolwatch.probe.vllm.pool_terms.side_owners`)."""
    out: dict[str, tuple[int, ...]] = {}
    refs = list(map(_REF, blocks))
    negative: tuple[int, ...] = ()
    if min(refs, default=1) <= 0:
        negative = tuple(b.block_id for b in blocks if b.ref_cnt <= 0 and not b.is_null)
    if negative:
        out["negative_ref"] = negative
    below: list[int] = []
    distinct: Sequence[Any] = blocks
    times: list[int] | None = None
    if len(set(map(id, blocks))) != len(blocks):  # a block listed twice in one free (#42571)
        counts = Counter(map(id, blocks))
        distinct = [b for b in {id(b): b for b in blocks}.values() if not b.is_null]
        times = [counts[id(b)] for b in distinct]
        below += [b.block_id for b, n in zip(distinct, times, strict=True) if n > 1 and b.ref_cnt < n]
    if index is not None:
        every = list(map(_ID, blocks))
        twice = times is not None and max(times, default=1) > 1
        held = side is not None and bool(side) and not side.keys().isdisjoint(every)  # a deferred entry's
        if (not index.explained(every) or twice or held) and resync is not None:
            resync()  # unannounced, listing a block twice, or still held beside the lists: read them now
        ids = every if distinct is blocks else list(map(_ID, distinct))
        short = _short(distinct, ids, index, times, side or {}, refs if distinct is blocks else None)
        below += [ids[k] for k in short if ids[k] not in negative]
    if below:
        out["ref_below_owners"] = tuple(dict.fromkeys(below))
    return out
