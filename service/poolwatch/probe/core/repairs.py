"""What guard did, for every engine: one :class:`~poolwatch.model.Repair` per pool and kind.

Guard is an engine room's (SGLang's repairs and refusals, vLLM's refused frees); the record of what
it did is the probe's, so the snapshot, the log line and the alert read the same on every engine.
:meth:`RepairLog.record` runs in the scheduler thread (a refusal from inside the wrapped free, a
repair at a hook boundary): it counts, keeps the last action's detail and logs one line.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from poolwatch.model import Pool, Repair, RepairKind
from poolwatch.probe.census.proofs import MAX_IDS

__all__ = ["RepairLog"]

log = logging.getLogger("poolwatch.probe")


class RepairLog:
    """Every repair of one probe, by (kind, pool); ``fresh`` until the next snapshot carried them."""

    def __init__(self) -> None:
        self._done: dict[tuple[RepairKind, Pool], Repair] = {}
        self.fresh = False

    def __bool__(self) -> bool:
        return bool(self._done)

    def all(self) -> tuple[Repair, ...]:
        return tuple(self._done[k] for k in sorted(self._done))

    def record(
        self,
        kind: RepairKind,
        pool: Pool,
        slots: Sequence[int],
        requests: tuple[str, ...],
        hook: str,
        seq: int,
        *,
        page: int = 1,
    ) -> Repair:
        """Count ``slots`` (ids; page ids when ``page > 1``, each ``page`` slots) under ``kind`` and
        ``pool`` in slots, keep this action's detail, log it; returns the updated record."""
        slots = tuple(slots)
        key = (kind, pool)
        before = self._done.get(key)
        count = (before.count if before else 0) + len(slots) * page
        done = Repair(kind, pool, count, slots[:MAX_IDS], hook, seq, requests, page)
        self._done[key] = done
        self.fresh = True
        log.warning(
            "poolwatch guard: %s %s %s %s after %s at iteration %d (requests: %s)",
            kind.value,
            pool.value,
            "slot(s)" if page == 1 else f"page(s) of {page} slots",
            _shown(slots),
            hook,
            seq,
            ", ".join(requests) or "none",
        )
        return done


def _shown(slots: tuple[int, ...]) -> str:
    """The ids as a list, at most :data:`MAX_IDS` of them and how many more."""
    if len(slots) <= MAX_IDS:
        return str(list(slots))
    return f"{list(slots[:MAX_IDS])} (+{len(slots) - MAX_IDS} more)"
