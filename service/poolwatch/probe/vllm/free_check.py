"""The free-time tripwire: a look at each list handed to ``BlockPool.free_blocks``, before it runs.

vLLM's ``free_blocks`` checks nothing.  A block already at ``ref_cnt`` 0 that is freed again goes to
-1 while it stays on the free queue, and the crash comes only when a later allocation pops it
(``assert block.ref_cnt == 0``); a block listed twice in one free (vLLM #42571) ends the same way.
Both are visible *at the free*, for the cost of one pass over the list (the free makes the same
pass), so the probe wraps the pool instance's ``free_blocks`` and names the blocks there:

* ``negative_ref``: a block freed with ``ref_cnt <= 0`` (a double free);
* ``ref_below_owners``: a block listed more often in one free than it has references.

Read-only: the list is materialised once (``free_blocks`` may get an iterator) and passed on as is.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

__all__ = ["free_findings"]


def free_findings(blocks: Sequence[Any]) -> dict[str, tuple[int, ...]]:
    """``{kind: block ids}`` this free will corrupt (empty when the free is sound)."""
    out: dict[str, tuple[int, ...]] = {}
    negative = tuple(b.block_id for b in blocks if b.ref_cnt <= 0 and not b.is_null)
    if negative:
        out["negative_ref"] = negative
    if len(set(map(id, blocks))) != len(blocks):
        counts = Counter(map(id, blocks))
        twice = {id(b): b for b in blocks if counts[id(b)] > 1 and not b.is_null}
        below = tuple(b.block_id for key, b in twice.items() if b.ref_cnt < counts[key])
        if below:
            out["ref_below_owners"] = below
    return out
