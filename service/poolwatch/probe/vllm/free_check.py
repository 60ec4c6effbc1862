"""The free-time tripwire: a look at each list handed to ``BlockPool.free_blocks``, before it runs.

vLLM's ``free_blocks`` checks nothing.  What this free will do wrong is visible at the free itself,
before any block it returns can be handed to another request, for about the cost of the free:

* ``negative_ref``: a block freed with ``ref_cnt <= 0`` (a double free; vLLM asserts only when a
  later allocation pops it);
* ``ref_below_owners``: a block this free would leave with fewer references than the lists that
  still name it -- listed more often in this one free than it has references (vLLM #42571), or a
  request's blocks freed twice while they are shared with another request (prefix caching: the
  shared blocks only drop from 2 to 1, or from 1 to 0 and go back to the free queue while the other
  request still lists them, and vLLM never asserts), or freed while their own request still lists
  them (a premature free).

The owners come from the incremental :class:`~poolwatch.probe.vllm.holders.HolderIndex`, which a
request's own pop updates first (the wrapped ``pop_blocks_for_free``/``free``: its occurrences stop
owning, and its blocks are *expected* at a free).  A free that no pop announced -- a stale or copied
table, a connector's release, a premature free -- is judged against the lists as they are at that
moment (``resync``: the lists appended since the last sample read first), so the owners counted are
exact; a free fully announced is judged against the lists last counted (those new since the last
sample may own more: never a false finding).  Read-only: the list is looked at, never changed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any

from poolwatch.probe.vllm.holders import HolderIndex

__all__ = ["free_findings"]

_ID = attrgetter("block_id")
_REF = attrgetter("ref_cnt")


def _short(blocks: Sequence[Any], ids: list[int], index: HolderIndex, null_id: int | None) -> list[int]:
    """Positions whose block this free leaves below its owners (distinct blocks only)."""
    refs = list(map(_REF, blocks))
    live, transfer = index.counts["live"], index.counts["transfer"]
    owners = [live.get(i, 0) + (transfer.get(i, 0) if transfer else 0) for i in ids]
    return [
        k
        for k, (ref, own) in enumerate(zip(refs, owners, strict=True))
        if ref - 1 < own and ids[k] != null_id
    ]


def free_findings(
    blocks: Sequence[Any], index: HolderIndex | None = None, resync: Callable[[], object] | None = None
) -> dict[str, tuple[int, ...]]:
    """``{kind: block ids}`` this free will corrupt (empty when the free is sound)."""
    out: dict[str, tuple[int, ...]] = {}
    negative = tuple(b.block_id for b in blocks if b.ref_cnt <= 0 and not b.is_null)
    if negative:
        out["negative_ref"] = negative
    below: list[int] = []
    if len(set(map(id, blocks))) != len(blocks):  # a block listed twice in one free (#42571)
        counts = Counter(map(id, blocks))
        twice = {id(b): b for b in blocks if counts[id(b)] > 1 and not b.is_null}
        below += [b.block_id for key, b in twice.items() if b.ref_cnt < counts[key]]
    elif index is not None:
        ids = list(map(_ID, blocks))
        if not index.explained(ids) and resync is not None:
            resync()  # a free no pop announced: judge it against the lists as they are now
        below += [ids[k] for k in _short(blocks, ids, index, index.null_id) if ids[k] not in negative]
    if below:
        out["ref_below_owners"] = tuple(dict.fromkeys(below))
    return out
