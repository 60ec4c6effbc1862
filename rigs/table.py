"""Looking a release up in an engine's release table (:mod:`rigs.sglang.releases`,
:mod:`rigs.vllm.releases`).  Stdlib only."""

from __future__ import annotations

from collections.abc import Container, Sequence
from typing import Protocol, TypeVar

__all__ = ["in_tier", "row"]


class Row(Protocol):
    @property
    def version(self) -> str: ...

    @property
    def tiers(self) -> Container[str]: ...


R = TypeVar("R", bound=Row)


def row(rows: Sequence[R], version: str, engine: str) -> R:
    """The row of ``version`` (a release outside the table is a clear error naming those in it)."""
    for found in rows:
        if found.version == version:
            return found
    known = ", ".join(r.version for r in rows)
    raise LookupError(f"{engine} {version} is not in the rigs' release table ({known})")


def in_tier(rows: Sequence[R], tier: str) -> tuple[str, ...]:
    """The releases ``tier`` runs on, in the table's order (oldest first): a test's parameters."""
    return tuple(r.version for r in rows if tier in r.tiers)
