"""What one snapshot judges (its verdict set), memoised per rank-source.  Pure.

A snapshot is a verdict -- a clean sample when no signal names it -- on the conservation alerts
of every pool whose balance it can tell (or that a tripwire names), on the probe's health when it
carries the probe's, on the repair alert of every pool a probe snapshot reports, and on the
forecast of every pool with a fitted trend.  Which verdicts those are depends only on the
snapshot's *signature*: the rank's identity labels, which pools it can tell, the tripwires'
pools, whether the probe reported, the pools reported and the pools with a trend.  A healthy
rank's signature is the same snapshot after snapshot, so :class:`JudgedMemo` keeps the last
signature and its verdict set per rank-source and the set (and its ~14 label look-ups) is built
again only when the signature changes.  :func:`reference_judged` is the plain construction, kept
as the reference the memo is compared with.
"""

from __future__ import annotations

from collections.abc import Hashable, Set
from dataclasses import dataclass

from poolwatch.conservation import Balance, findings
from poolwatch.detect.alert import Verdict, rank_labels
from poolwatch.detect.forecast import FORECAST
from poolwatch.detect.health import probe_judged
from poolwatch.detect.repairs import repair_judged
from poolwatch.detect.signals import conservation_judged
from poolwatch.model import Pool, Snapshot

__all__ = ["JudgedMemo", "reference_judged", "scan"]

_TROUBLE = (Balance.SURPLUS, Balance.DEFICIT)


def scan(snap: Snapshot) -> tuple[tuple[Pool, ...], bool]:
    """The pools whose balance ``snap`` can tell, and whether any of them is out of balance (a
    surplus or deficit: the only findings a conservation signal is built from)."""
    known: list[Pool] = []
    troubled = False
    for pool, finding in findings(snap).items():
        if finding.balance is not Balance.UNKNOWN:
            known.append(pool)
            troubled = troubled or finding.balance in _TROUBLE
    return tuple(known), troubled


def reference_judged(snap: Snapshot, trended: tuple[Pool, ...]) -> set[Verdict]:
    """Every verdict ``snap`` gives, built from scratch; ``trended``: its pools with a fitted trend."""
    forecasts = {(FORECAST, rank_labels(snap.worker, p.value)) for p in trended}
    return conservation_judged(snap) | probe_judged(snap) | forecasts | repair_judged(snap)


@dataclass(slots=True)
class JudgedMemo:
    """The last signature of one rank-source and the verdict set it gives."""

    signature: Hashable = None
    judged: frozenset[Verdict] = frozenset()

    def judged_by(self, snap: Snapshot, known: tuple[Pool, ...], trended: tuple[Pool, ...]) -> Set[Verdict]:
        """``snap``'s verdict set (``known``: from :func:`scan`), rebuilt only on a new signature."""
        w = snap.worker
        reported = tuple(snap.pools) if snap.probe is not None else ()
        tripped = tuple(t.pool for t in snap.tripwires)
        probed = snap.probe is not None
        signature = (
            w.worker,
            w.role,
            w.dp_rank,
            w.tp_rank,
            w.pp_rank,
            known,
            tripped,
            probed,
            reported,
            trended,
        )
        if signature != self.signature:
            self.signature, self.judged = signature, frozenset(reference_judged(snap, trended))
        return self.judged
