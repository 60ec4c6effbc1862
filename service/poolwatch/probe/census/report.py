"""The JSON detail of the last census (``GET /v1/census``); stdlib only.

Every engine's census detail is served in one envelope; each pool's body is what its census
proved (:meth:`~poolwatch.probe.core.engine.Proof.body`).
"""

from __future__ import annotations

from typing import Any

from poolwatch.model.rank import Phase

__all__ = ["CENSUS_SCHEMA", "census_envelope"]

CENSUS_SCHEMA = "poolwatch.census"


def census_envelope(
    pools: list[dict[str, Any]], *, seq: int, hook: str, taken_at: float, cost: float, phase: Phase
) -> dict[str, Any]:
    """The document every engine's census detail is served in; ``pools``: one body per pool."""
    return {
        "schema": CENSUS_SCHEMA,
        "version": 1,
        "seq": seq,
        "hook": hook,
        "phase": phase.value,
        "taken_at": taken_at,
        "cost_seconds": cost,
        "pools": pools,
    }
