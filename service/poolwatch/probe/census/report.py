"""The JSON detail of the last census (``GET /v1/census``); stdlib only."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from poolwatch.model import Phase
from poolwatch.probe.census.proofs import PoolCensus

__all__ = ["CENSUS_SCHEMA", "census_doc", "census_envelope"]

CENSUS_SCHEMA = "poolwatch.census"


def _pool(c: PoolCensus) -> dict[str, Any]:
    doc = asdict(c)
    doc.pop("missing_ids")  # the guard's working set; ``missing`` names the first ids
    doc["owners"] = {str(slot): list(rids) for slot, rids in c.owners.items()}
    doc["pool"] = c.pool.value
    doc["last_id"] = c.first_id + c.size - 1
    for key in ("duplicates", "free_and_live", "free_and_tree", "out_of_range"):
        doc[key] = list(doc[key])
    doc["missing"] = None if c.missing is None else list(c.missing)
    doc["balanced_ids"] = not any(c.tripwires("", 0))
    return doc


def census_doc(
    found: Sequence[PoolCensus], *, seq: int, hook: str, taken_at: float, cost: float, phase: Phase
) -> dict[str, Any]:
    """The detail of an identity census (SGLang's pools)."""
    pools = [_pool(c) for c in found]
    return census_envelope(pools, seq=seq, hook=hook, taken_at=taken_at, cost=cost, phase=phase)


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
