"""Guard on vLLM (opt-in, ``POOLWATCH_PROBE_GUARD=1``): what the wrapped ``free_blocks`` hands on to
vLLM's own, when the free-time check (:mod:`~poolwatch.probe.vllm.free_check`) finds a fault in it.

The check names the blocks this free would leave with fewer references than owners (a block freed
at ``ref_cnt`` 0, listed more often than it has references, or still listed by a live request, a
deferred free, a copy-on-write pair or a pin).  For those blocks only, the owners are then counted
exactly, the census's way (every list of every kind, read afresh:
:func:`~poolwatch.probe.vllm.pool_terms.owner_lists`), and each may lose at most
``ref_cnt - owners`` references in this free:

==========================  ====================================  ==================================
the fault                   what is handed on                     after it
==========================  ====================================  ==================================
a double free (ref 0)       none of its occurrences               as before the call: queued once at
                                                                  ref 0, or held by whoever took it
a shared prefix freed       none (its ``ref_cnt`` is already      still held at ref = owners by the
twice (ref = owners)        its owners')                          request that lists it
#42571: one block listed    as many occurrences as it has         ref 0 = owners, queued once
k times at ref < k          references beyond its owners
a premature free            none (its request still lists it)     untouched; the request goes on
==========================  ====================================  ==================================

Every other block of the call is handed on as it came, in its order (the null block included,
where it was).  So after a refusal ``ref_cnt == owners`` for every block of the call, the free
queue holds exactly the blocks at ``ref_cnt`` 0 and nothing vLLM later asserts on is left wrong.
The families differ in one way that matters here: 0.10-0.23 free in two passes (every ``ref_cnt``
first, then each *occurrence* at 0 queued), so a block still listed twice in what is handed on
would be queued twice: there the kept list is handed on in rounds, each listing a block once
(:func:`admit`).  From 0.24 a block is queued the moment it reaches 0, once.

A block whose references were already below its owners before this free (a fault guard did not
see, e.g. a ``ref_cnt`` written directly) has every occurrence refused and stays a finding.

Cost: nothing on a sound free (the check finds nothing, and nothing here runs); on a fault, one
pass over every list (the census's owner count, O(blocks held)), once per faulty call.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from poolwatch.probe.core.engine import Release
from poolwatch.probe.core.reading import MISSING, Reading
from poolwatch.probe.vllm.pool_terms import block_pool, hisparse, in_pool, owner_lists
from poolwatch.probe.vllm.shapes import VllmShape

__all__ = ["MAX_REQUESTS", "Admission", "FreeRefuser", "Refusal", "admit", "refuser_for"]

log = logging.getLogger("poolwatch.probe")

_ID = attrgetter("block_id")
MAX_REQUESTS = 16  # owners named per refusal


@dataclass(frozen=True, slots=True)
class Admission:
    """What one faulty call hands on: ``calls`` in order (empty: nothing), and what it refused."""

    calls: tuple[list[Any], ...]
    refused: dict[int, int]  # block id -> occurrences refused
    passed: dict[int, int]  # block id -> occurrences handed on (of the capped blocks only)


def admit(blocks: list[Any], allowed: dict[int, int], *, rounds: bool) -> Admission:
    """Hand on every occurrence of ``blocks`` except, for each block id in ``allowed``, those past
    its first ``allowed[id]``; ``rounds``: list no block twice in one call (a two-pass free)."""
    seen: dict[int, int] = {}
    refused: dict[int, int] = {}
    kept: list[Any] = []
    for block in blocks:
        cap = allowed.get(block.block_id)
        if cap is not None:
            n = seen.get(block.block_id, 0)
            if n >= cap:
                refused[block.block_id] = refused.get(block.block_id, 0) + 1
                continue
            seen[block.block_id] = n + 1
        kept.append(block)
    calls = _rounds(kept) if rounds else [kept]
    return Admission(tuple(c for c in calls if c), refused, seen)


def _rounds(blocks: list[Any]) -> list[list[Any]]:
    """``blocks`` split so that no call lists a block twice: the j-th occurrence of each block goes
    to call j, in order (the null block, never queued, stays in the first)."""
    times: dict[int, int] = {}
    calls: list[list[Any]] = [[]]
    for block in blocks:
        if block.is_null:
            calls[0].append(block)
            continue
        j = times.get(id(block), 0)
        times[id(block)] = j + 1
        if j == len(calls):
            calls.append([])
        calls[j].append(block)
    return calls


@dataclass(frozen=True, slots=True)
class Refusal:
    """The guard's answer for one faulty call."""

    calls: tuple[list[Any], ...]  # what to hand vLLM's free_blocks, in order
    refused: tuple[int, ...]  # block ids with an occurrence refused
    requests: tuple[str, ...]  # the owners the refused frees would have robbed
    settled: tuple[int, ...]  # refused blocks left exactly at their owners (a fault averted)
    left: dict[str, tuple[int, ...]]  # findings still true after the call (tripwires)


class FreeRefuser:
    """The refusals of one scheduler's block pool (built only in guard mode)."""

    def __init__(self, scheduler: Any, shape: VllmShape) -> None:
        self.scheduler, self.shape = scheduler, shape
        self.refused = 0  # occurrences refused since the probe started

    def refuse(self, blocks: list[Any], found: dict[str, tuple[int, ...]]) -> Refusal:
        """What to hand on of ``blocks``, given the check's ``found`` (``{kind: block ids}``)."""
        pool = block_pool(self.scheduler, Reading())
        flagged = {i for ids in found.values() for i in ids}
        suspects = {b.block_id: b for b in blocks if b.block_id in flagged and not b.is_null}
        if pool is not MISSING:  # another pool's block (HiSparse, guard off there) is never refused
            suspects = {i: b for i, b in suspects.items() if in_pool(b, pool, self.shape)}
        owners, names = self._owners(pool, set(suspects))
        refs = {i: b.ref_cnt for i, b in suspects.items()}
        allowed = {i: max(0, refs[i] - owners.get(i, 0)) for i in suspects}
        admission = admit(blocks, allowed, rounds=not self.shape.single_pass_free)
        self.refused += sum(admission.refused.values())
        after = {i: refs[i] - admission.passed.get(i, 0) - owners.get(i, 0) for i in suspects}
        # a block left at its owners (or above: the check's owners were more than the exact count)
        # is no finding; one still below them was short before this call
        fine = {i for i, surplus in after.items() if surplus >= 0}
        left = {kind: kept for kind, ids in found.items() if (kept := tuple(i for i in ids if i not in fine))}
        refused = tuple(admission.refused)
        requests = tuple(dict.fromkeys(n for i in refused for n in names.get(i, ())))[:MAX_REQUESTS]
        settled = tuple(i for i in refused if after[i] == 0)
        return Refusal(admission.calls, refused, requests, settled, left)

    def _owners(self, pool: Any, wanted: set[int]) -> tuple[dict[int, int], dict[int, list[str]]]:
        """Each wanted block's occurrences in every owner's list (the census's count), and who."""
        counts: dict[int, int] = {}
        names: dict[int, list[str]] = {}
        if not wanted or pool is MISSING:
            return counts, names
        for kind, owner, listed in owner_lists(self.scheduler, self.shape, pool, Reading()):
            if kind == "stale":
                continue
            if wanted.isdisjoint(map(_ID, listed)):  # C-level; most lists name none of them
                continue
            for i in map(_ID, listed):
                if i in wanted:
                    counts[i] = counts.get(i, 0) + 1
                    names.setdefault(i, []).append(owner)
        return counts, names


def refuser_for(
    scheduler: Any, release: Release, shape: VllmShape, mgrs: tuple[Any, ...], guard: bool
) -> FreeRefuser | None:
    """Guard mode (``guard``) where the owners can be counted exactly: a release whose wheel was
    read, and no HiSparse manager (it lists pages it holds no reference to); else off, said once."""
    if not guard:
        return None
    why = ""
    if not release.verified:
        why = f"vLLM {release.version} is a release poolwatch has not read"
    elif shape.hisparse and hisparse(mgrs):
        why = "a HiSparse manager lists blocks it holds no reference to: owners cannot be counted exactly"
    if why:
        log.warning("poolwatch guard: off on this scheduler (%s); the probe only watches", why)
        return None
    return FreeRefuser(scheduler, shape)
