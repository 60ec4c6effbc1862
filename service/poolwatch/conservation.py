"""Conservation arithmetic: the signed gap of each pool and what it proves.  Pure functions.

The gap of a pool is ``size - available - evictable - protected - held - session_held``:

* ``0``   balanced: every slot is accounted for exactly once;
* ``> 0`` *deficit*: slots nobody owns any more, lost for good (a leak);
* ``< 0`` *surplus*: slots counted twice, typically freed twice (a double free).  Two requests can
  then be handed the same slot and silently corrupt each other's state.

Only an exact source (the in-process probe) knows ``protected`` and ``held``.  A coarse source
(SGLang's ``/metrics`` or log) knows ``used = size - available - evictable`` and still proves two
things: ``used < 0`` is a certain surplus of at least ``-used`` slots, and when the worker is fully
idle nothing is protected or held, so ``used - session_held`` *is* the gap.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from poolwatch.model.rank import Exactness, Phase, Pool, PoolAccount
from poolwatch.model.snapshot import Snapshot

__all__ = [
    "Balance",
    "Basis",
    "Finding",
    "assess",
    "assess_snapshot",
    "findings",
    "describe",
    "gap",
    "share_findings",
    "signature",
    "used",
]


class Balance(enum.StrEnum):
    BALANCED = "balanced"
    DEFICIT = "deficit"  # slots lost: a leak
    SURPLUS = "surplus"  # slots counted twice: a double free
    UNKNOWN = "unknown"  # the source cannot tell


class Basis(enum.StrEnum):
    """Why a finding is certain."""

    EXACT = "exact"  # every term read at one loop boundary
    NEGATIVE_USED = "negative_used"  # available + evictable > size, whatever else is true
    IDLE_RESIDUAL = "idle_residual"  # fully idle: used must equal session_held
    NONE = "none"  # nothing can be proven from this data


@dataclass(frozen=True, slots=True)
class Finding:
    """The verdict on one pool.  ``gap`` is signed (``None`` when unknown); for a
    ``NEGATIVE_USED`` finding it is a bound: the surplus is at least ``-gap`` slots."""

    pool: Pool
    balance: Balance
    gap: int | None
    basis: Basis

    @property
    def slots(self) -> int:
        """The size of the imbalance in slots (0 when balanced or unknown)."""
        return abs(self.gap) if self.gap is not None else 0


def used(account: PoolAccount) -> int | None:
    """Slots neither free nor evictable: ``size - available - evictable``, or what SGLang reported."""
    a = account
    if a.size is not None and a.available is not None and a.evictable is not None:
        return a.size - a.available - a.evictable
    return a.used


def gap(account: PoolAccount) -> int | None:
    """The exact signed gap, or ``None`` unless every term is known."""
    u = used(account)
    protected, held = account.protected, account.held
    if u is None or account.available is None or protected is None or held is None:
        return None
    return u - protected - held - (account.session_held or 0)


def _balance(signed_gap: int) -> Balance:
    if signed_gap > 0:
        return Balance.DEFICIT
    if signed_gap < 0:
        return Balance.SURPLUS
    return Balance.BALANCED


def assess(account: PoolAccount, phase: Phase) -> Finding:
    """What the figures of one pool prove, given the worker's phase."""
    exact = gap(account) if account.exactness is Exactness.EXACT else None
    if exact is not None:
        return Finding(account.pool, _balance(exact), exact, Basis.EXACT)
    u = used(account)
    if u is None:
        return Finding(account.pool, Balance.UNKNOWN, None, Basis.NONE)
    if u < 0:
        return Finding(account.pool, Balance.SURPLUS, u, Basis.NEGATIVE_USED)
    if phase is Phase.IDLE:
        residual = u - (account.session_held or 0)
        return Finding(account.pool, _balance(residual), residual, Basis.IDLE_RESIDUAL)
    return Finding(account.pool, Balance.UNKNOWN, None, Basis.NONE)


def findings(snap: Snapshot) -> Mapping[Pool, Finding]:
    """Every pool's finding, in pool order, assessed once per snapshot (memoised on it): the
    store, exporter, detector, API, ``check`` and the probe's long-poll signature all read these."""
    return snap.derived("findings", lambda: _assess_pools(snap))


def share_findings(old: Snapshot, new: Snapshot) -> None:
    """``new`` has ``old``'s pools and phase (a later sample of the same figures, see
    :mod:`poolwatch.codec.renewal`): it takes ``old``'s findings instead of assessing them again."""
    new.derived("findings", lambda: findings(old))


def _assess_pools(snap: Snapshot) -> Mapping[Pool, Finding]:
    accounts = {a.pool: a for a in snap.pools.values()}
    return MappingProxyType({p: assess(accounts[p], snap.phase) for p in Pool if p in accounts})


def assess_snapshot(snap: Snapshot) -> tuple[Finding, ...]:
    """One finding per pool of the snapshot, in pool order (from :func:`findings`)."""
    return tuple(findings(snap).values())


_MEANING = {Balance.SURPLUS: "double free", Balance.DEFICIT: "leak"}
_NOUN = {Balance.SURPLUS: "surplus", Balance.DEFICIT: "deficit"}


def _phrase(f: Finding) -> str:
    if f.balance in (Balance.BALANCED, Balance.UNKNOWN):
        return f"{f.pool.value}: {f.balance.value}"
    plural = "" if f.slots == 1 else "s"
    bound = "at least " if f.basis is Basis.NEGATIVE_USED else ""
    noun, meaning = _NOUN[f.balance], _MEANING[f.balance]
    return f"{f.pool.value}: {noun} of {bound}{f.slots} slot{plural} ({meaning})"


def describe(findings: tuple[Finding, ...]) -> str:
    """One line for people, imbalanced pools first:
    ``mamba: surplus of 1 slot (double free); full: balanced``."""
    rank = {Balance.SURPLUS: 0, Balance.DEFICIT: 0, Balance.BALANCED: 1, Balance.UNKNOWN: 2}
    ordered = sorted(findings, key=lambda f: rank[f.balance])
    return "; ".join(_phrase(f) for f in ordered)


def signature(snap: Snapshot) -> str:
    """What an alert depends on, as a short string: the balance of every pool and the tripwires.

    Two snapshots with the same signature raise the same alerts, so a watcher long-polling the
    probe (``GET /v1/snapshot?sig=...&wait=...``) is answered early only when this changes.  A
    deficit needs several samples before it pages, so while one is seen every new sample differs
    (the iteration is part of the signature): the watcher then re-polls at the probe's sample rate.
    A new guard repair or the probe's final snapshot also changes it.
    """
    findings = assess_snapshot(snap)
    pools = ",".join(f"{f.pool.value}={f.balance.value}" for f in findings)
    trips = ",".join(sorted(f"{t.kind.value}:{t.pool.value}:{t.count}" for t in snap.tripwires))
    repairs = ",".join(sorted(f"{r.kind.value}:{r.pool.value}:{r.count}" for r in snap.repairs))
    pending = f"|{snap.seq}" if any(f.balance is Balance.DEFICIT for f in findings) else ""
    final = "|final" if snap.final else ""
    return f"{snap.boot_id}|{pools}|{trips}|{repairs}{pending}{final}"
