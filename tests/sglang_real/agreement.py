"""The probe's reading against SGLang's own figures and checks, on a rank a
:class:`~rigs.sglang.driver.Driver` moves (run inside a release venv)."""

from __future__ import annotations

from poolwatch.model.rank import Phase, Pool
from rigs.checks import report
from rigs.sglang.driver import Driver, gaps
from rigs.sglang.releases import Check

__all__ = ["agrees_at_idle", "agrees_while_busy", "expect_balanced"]


def expect_balanced(d: Driver, label: str) -> None:
    """At the next loop boundary every pool balances exactly and nothing is named."""
    snap = d.boundary()
    bad = {k: v for k, v in gaps(snap).items() if v != 0}
    unread = {p.value: a.unreadable for p, a in snap.pools.items() if a.unreadable}
    report(
        f"{label}: every pool balances exactly ({snap.phase.value})",
        not bad and not unread and not snap.tripwires,
        {"gaps": gaps(snap), "unreadable": unread, "tripwires": [str(t) for t in snap.tripwires]},
    )


def agrees_at_idle(d: Driver, label: str) -> bool:
    """At an idle boundary the probe reads SGLang's own figures and says what SGLang's own idle
    check says; returns whether SGLang found a leak."""
    if d.release.check is Check.CHECKER:
        return _agrees_with_checker(d, label)
    s = d.sched
    snap = d.boundary()
    leak, _message = s.own_check()
    try:
        s._check_req_pool()
        rows_ok = True
    except ValueError:
        rows_ok = False
    info = s._get_mamba_token_info()
    full, mamba = snap.pools[Pool.FULL], snap.pools[Pool.MAMBA]
    same = (full.available, full.evictable, mamba.available, mamba.evictable) == tuple(info[4:8])
    theirs = {
        "full": info[0] - s.tree_cache.full_protected_size(),
        "mamba": info[1] - s.tree_cache.mamba_protected_size(),
    }
    ours = gaps(snap)
    report(
        f"{label}: at idle the probe reads SGLang's own figures and agrees with its check",
        snap.phase is Phase.IDLE
        and same
        and leak == any(ours.values())
        and rows_ok == (ours["req"] == 0)
        and (ours["full"], ours["mamba"]) == (theirs["full"], theirs["mamba"]),
        {"phase": snap.phase.value, "probe": ours, "sglang": theirs, "sglang_leak": leak, "rows_ok": rows_ok},
    )
    return leak


def _agrees_with_checker(d: Driver, label: str) -> bool:
    snap = d.boundary()
    leak, message = d.sched.own_check()
    ours = gaps(snap)
    report(
        f"{label}: at idle the probe agrees with SGLang's invariant checker",
        snap.phase is Phase.IDLE
        and leak == any(ours.values())
        and not any(a.unreadable for a in snap.pools.values()),
        {"probe": ours, "sglang_leak": leak, "sglang": message},
    )
    return leak


def agrees_while_busy(d: Driver, label: str) -> None:
    """0.5.23: the probe's held KV equals SGLang's own busy-time uncached sum, every gap is 0."""
    snap = d.boundary()
    full_uncached, _ = d.sched.invariant_checker._get_total_uncached_sizes()
    held = snap.pools[Pool.FULL].held
    report(
        f"{label}: the probe's held KV equals SGLang's own uncached sum, every gap is 0",
        held == full_uncached and all(v == 0 for v in gaps(snap).values()) and not snap.tripwires,
        {"probe_held": held, "sglang_uncached": full_uncached, "gaps": gaps(snap)},
    )
