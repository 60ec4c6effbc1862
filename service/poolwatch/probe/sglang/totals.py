"""What the holders' passes share at C speed: who holds a Mamba slot, identity comparisons of
request lists, and the memo a rank's samples keep from one to the next.

The live requests' holdings themselves are kept by :class:`~poolwatch.probe.sglang.ledger.Ledger`
(each request recomputed only when what decides its figures changed); :func:`mamba_holders` serves
the Mamba census, :func:`same_items` the live set's dedup (:mod:`poolwatch.probe.sglang.requests`).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence
from typing import Any

from poolwatch.probe.sglang.host_census import HostReader
from poolwatch.probe.sglang.ledger import Ledger
from poolwatch.probe.sglang.nodes import TreeRoot
from poolwatch.probe.sglang.signals import plain_finished

__all__ = ["Memo", "length_of", "mamba_holders", "same_items"]

_FINISHED = operator.methodcaller("finished")
_MAMBA = operator.attrgetter("mamba_pool_idx")
_REASON = operator.attrgetter("finished_reason")
_NONE = itertools.repeat(None)


def _finished_sources(holders: Sequence[Any], plain: bool | None = None) -> tuple[list[Any], bool]:
    """``(finished_reason of each holder, True)`` when every holder's class has the plain
    ``finished()`` (read at C speed, no Python frame per request), else ``(finished(), False)``.
    ``plain``: already known for these very holders."""
    if plain is None:
        plain = all(map(plain_finished, set(map(type, holders))))
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


def length_of(seq: Any) -> int:
    """``len()`` of a list or a tensor (a tensor's shape is on the host: no GPU sync)."""
    shape = getattr(seq, "shape", None)
    return int(shape[0]) if shape is not None else len(seq)


class Memo:
    """What one sample keeps for the next: the live set's deduplicated holders (while every list
    they came from holds the same requests: :func:`~poolwatch.probe.sglang.requests.collect_live`),
    the holders' figures by identity (the ledger) and the HiCache host account's reader."""

    def __init__(self) -> None:
        self.groups: tuple[list[Any], set[int], tuple[Any, ...], list[int]] | None = None
        self.host = HostReader()  # the HiCache host account, walked within its budget
        self.ledger = Ledger()  # the live requests' holdings by identity (footprint.holdings)
        self.root = TreeRoot()  # whether the prefix tree has a root node (pool_terms)
