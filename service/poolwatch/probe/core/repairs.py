"""What guard did, for every engine: one :class:`~poolwatch.model.findings.Repair` per pool and kind.

Guard is an engine room's (SGLang's repairs and refusals, vLLM's refused frees); the record of what
it did is the probe's, so the snapshot, the log line and the alert read the same on every engine.
:meth:`RepairLog.record` runs in the scheduler thread (a refusal from inside the wrapped free, a
repair at a hook boundary): it counts, keeps the last action's detail and logs one line.

The last action's detail includes the engine's call site (:mod:`~poolwatch.probe.core.call_site`):
captured inside ``record`` the first time a kind, pool and ``hook`` (the path: ``mamba_pool.free``,
``free_blocks``, a hook's name) are recorded, and repeated from memory after that (once per
incident, not per repeat).  Every caller gets it without doing anything: a refusal recorded from
inside the wrapped free sees the engine's frames that called the free.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from poolwatch.model.findings import CallSite, Repair, RepairKind
from poolwatch.model.rank import Pool
from poolwatch.probe.census.proofs import MAX_IDS
from poolwatch.probe.core.call_site import CallSites

__all__ = ["RepairLog"]

log = logging.getLogger("poolwatch.probe")


class RepairLog:
    """Every repair of one probe, by (kind, pool); ``fresh`` until the next snapshot carried them."""

    def __init__(self, sites: CallSites | None = None) -> None:
        self._done: dict[tuple[RepairKind, Pool], Repair] = {}
        self._sites: dict[tuple[RepairKind, Pool, str], CallSite | None] = {}  # captured once each
        self.sites = sites if sites is not None else CallSites("")
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
        site = self._site(kind, pool, hook, seq)
        done = Repair(kind, pool, count, slots[:MAX_IDS], hook, seq, requests, page, site)
        self._done[key] = done
        self.fresh = True
        log.warning(
            "poolwatch guard: %s %s %s %s after %s at iteration %d (requests: %s)%s",
            kind.value,
            pool.value,
            "slot(s)" if page == 1 else f"page(s) of {page} slots",
            _shown(slots),
            hook,
            seq,
            ", ".join(requests) or "none",
            _called_from(site),
        )
        return done

    def _site(self, kind: RepairKind, pool: Pool, hook: str, seq: int) -> CallSite | None:
        """The engine's call site of this path: captured the first time (the walk passes over the
        probe's own frames up to the engine's), remembered after."""
        where = (kind, pool, hook)
        if where not in self._sites:
            if len(self._sites) >= _MAX_PATHS:
                return None
            self._sites[where] = self.sites.capture(seq)
        return self._sites[where]


_MAX_PATHS = 256  # distinct (kind, pool, hook) call sites remembered


def _called_from(site: CallSite | None) -> str:
    """``; free site: file:line function <- ...`` for the log line (the engine's innermost frames)."""
    if site is None:
        return ""
    chain = " <- ".join(f"{f.file}:{f.line} {f.function}" for f in site.frames[:4])
    return f"; {site.kind.value} site: {chain}"


def _shown(slots: tuple[int, ...]) -> str:
    """The ids as a list, at most :data:`MAX_IDS` of them and how many more."""
    if len(slots) <= MAX_IDS:
        return str(list(slots))
    return f"{list(slots[:MAX_IDS])} (+{len(slots) - MAX_IDS} more)"
