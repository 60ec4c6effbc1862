"""A sampled judge of what a probe snapshot names per pool: the probe's proofs at a free (tripwires),
its guard's repairs, its census's counter witnesses.  Pure.

Such a judge gives one signal per pool the snapshot's findings name, in pool order, and its
verdicts are its alert on every pool a probe snapshot reports (a probe snapshot with no finding on
a pool is a clean sample of it; a snapshot without the probe tells nothing).  A family's judge
subclasses :class:`PoolJudge` and writes only which findings it reads (:meth:`~PoolJudge.found`)
and what it says of one pool's (:meth:`~PoolJudge.say`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import ClassVar, Generic, Protocol, TypeVar

from poolwatch.detect.alert import Signal, Verdict, rank_labels, sampled_subject
from poolwatch.detect.family import Judge, Seen, pool_verdicts
from poolwatch.detect.outcome import facts
from poolwatch.detect.schema import Severity
from poolwatch.engines import EngineEntry
from poolwatch.model.rank import Pool
from poolwatch.model.snapshot import Snapshot

__all__ = ["PoolJudge", "Said", "by_pool"]

Said = tuple[Severity, str, float]  # one pool's signal: its severity, text and value


class _OnPool(Protocol):
    @property
    def pool(self) -> Pool: ...


F = TypeVar("F", bound=_OnPool)
_ORDER = {pool: index for index, pool in enumerate(Pool)}


def by_pool(found: Iterable[F]) -> list[tuple[Pool, list[F]]]:
    """``found`` grouped by the pool each names, in pool order (each group in its given order)."""
    groups: dict[Pool, list[F]] = {}
    for f in found:
        groups.setdefault(f.pool, []).append(f)
    return sorted(groups.items(), key=lambda kv: _ORDER[kv[0]])


class PoolJudge(Judge, Generic[F]):
    """The judge of ``ALERT`` on each pool a probe snapshot reports (its device pools only, with
    ``DEVICE_ONLY``), from the findings :meth:`found` reads."""

    ALERT: ClassVar[str]
    DEVICE_ONLY: ClassVar[bool] = False

    def found(self, snap: Snapshot) -> Sequence[F]:
        """The findings of ``snap`` this judge reads (each names its pool)."""
        raise NotImplementedError

    def say(self, snap: Snapshot, entry: EngineEntry, pool: Pool, found: list[F]) -> Said:
        """The signal of one pool: ``found`` are its findings, ``entry`` the rank's engine's facts."""
        raise NotImplementedError

    def signals(self, seen: Seen) -> list[Signal]:
        """One signal per pool the snapshot's findings name, in pool order."""
        snap = seen.snap
        found = self.found(snap)
        if not found:
            return []
        entry, subject = facts(snap.worker.engine), sampled_subject(snap)
        out = []
        for pool, on_pool in by_pool(found):
            severity, text, value = self.say(snap, entry, pool, on_pool)
            out.append(
                Signal(self.ALERT, subject, severity, rank_labels(snap.worker, pool.value), text, value)
            )
        return out

    def signature(self, seen: Seen) -> tuple[Pool, ...]:
        """The pools a probe snapshot reports (none without the probe)."""
        snap = seen.snap
        if snap.probe is None:
            return ()
        return tuple(p for p in snap.pools if not (self.DEVICE_ONLY and p is Pool.HOST))

    def judged(self, seen: Seen) -> set[Verdict]:
        return pool_verdicts(seen.snap.worker, self.signature(seen), self.ALERT)
