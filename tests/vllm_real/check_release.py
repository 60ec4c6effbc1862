"""Drive one real vLLM V1 release's Scheduler on CPU with the probe attached; print one JSON line per check.

    <venv>/bin/python -m tests.vllm_real.check_release        (rigs.venv.Venv.run sets PYTHONPATH)

Each fault (``faults.py``) is injected the way it happens in vLLM, then the loop runs on until
vLLM's own assert fires (or the step budget ends); a check passes when the probe named the exact
block ids, and did so before that assert.  The guard checks (``check_guard.py``) run the same
faults with guard on.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from typing import Any

from poolwatch.conservation import gap
from poolwatch.model.findings import CallSiteKind, TripwireKind
from poolwatch.model.rank import Pool
from poolwatch.model.snapshot import Snapshot
from poolwatch.probe.lifecycle import detach
from rigs.checks import report, run_all
from rigs.vllm.engine import Engine
from tests.vllm_real.faults import (
    PREFIXES,
    clean_run,
    double_free,
    duplicate_in_one_free,
    feed,
    held_blocks,
    named,
    premature_free,
    run_until_assert,
    shared_double_free,
    started,
)


def check_clean(hybrid: bool, blocks: int = 400) -> None:
    """A long clean run; ``blocks`` small enough forces preemptions (their blocks are freed and
    re-allocated on resume) on top of prefix hits, aborts and chunked prefills."""
    e, probe = started(hybrid=hybrid, blocks=blocks)
    run = clean_run(e, probe)
    snap = run.final
    coordinator = e.sched.kv_cache_manager.coordinator
    report(
        "clean_run" + ("_hybrid" if hybrid else "") + ("_preempting" if blocks < 100 else ""),
        snap is not None and snap.tripwires == () and run.gaps == {0} and gap(snap.pools[Pool.FULL]) == 0,
        {
            "preempted": len(run.preempted),
            "steps": run.steps,
            "samples": run.samples,
            "censuses": probe.census_total,
            "aborted": run.aborted,
            "gaps": sorted(g for g in run.gaps if g is not None),
            "tripwires": [t.kind.value for t in snap.tripwires] if snap else None,
            "hits": sum(1 for b in e.sched.kv_cache_manager.block_pool.blocks if b.block_hash is not None),
            "coordinator": type(coordinator).__name__,
            "managers": [type(m).__name__ for m in coordinator.single_type_managers],
            "errors": probe.guard.errors_total,
            "last_error": probe.guard.last_error,
        },
    )
    detach(e.sched)


def check_double_free() -> None:
    rng = random.Random(2)
    e, probe = started()
    struck = double_free(e, probe, rng)
    crash = run_until_assert(e, rng, 400)
    at_free = struck.seen["at_free"]
    report(
        "double_free",
        struck.ids <= at_free and bool(struck.ids),
        {"ids": sorted(struck.ids), "named": sorted(at_free), "vllm_assert": crash},
    )
    detach(e.sched)


def check_shared_double_free() -> None:
    """Named at the second free, not at the sound one."""
    rng = random.Random(6)
    e, probe = started()
    struck = shared_double_free(e, probe, rng)
    seen = struck.seen
    crash = run_until_assert(e, rng, 200)
    report(
        "shared_double_free",
        len(seen["shared"]) >= 3 and seen["shared"] <= seen["at_free"] and not seen["sound"],
        {
            "shared": sorted(seen["shared"]),
            "named_at_free": sorted(seen["at_free"]),
            "named_at_the_sound_free": sorted(seen["sound"]),
            "shared_ref_cnt_after": seen["shared_refs"],
            "vllm_assert": crash,
        },
    )
    detach(e.sched)


def free_site(snap: Snapshot | None) -> list[str]:
    """The call site of the finding made at the free, as ``file:line function`` (innermost first)."""
    for t in snap.tripwires if snap else ():
        if t.call_site is not None and t.call_site.kind is CallSiteKind.FREE:
            return [f"{f.file}:{f.line} {f.function}" for f in t.call_site.frames]
    return []


def site_in_vllm(site: list[str]) -> bool:
    """The innermost frame is vLLM's own code freeing a request's blocks (the manager's ``free``), and
    the chain reaches the scheduler that asked for it."""
    return (
        bool(site)
        and site[0].startswith("vllm/v1/core/")
        and "free" in site[0].rsplit(" ", 1)[-1]
        and any("sched/scheduler.py" in frame for frame in site)
    )


def check_duplicate_in_one_free() -> None:
    rng = random.Random(3)
    e, probe = started()
    struck = duplicate_in_one_free(e, probe, rng)
    (dup,) = struck.ids
    site = free_site(probe.latest)
    crash = run_until_assert(e, rng, 400)
    report(
        "duplicate_in_one_free_42571",
        dup in struck.seen["at_free"] and dup in struck.seen["before"] and site_in_vllm(site),
        {
            "block": dup,
            "named_before_free": sorted(struck.seen["before"]),
            "named_at_free": sorted(struck.seen["at_free"]),
            "ref_cnt": struck.blocks[0].ref_cnt,
            "vllm_assert": crash,
            "freed_by": site,
        },
    )
    detach(e.sched)


def check_leak_on_abort() -> None:
    rng = random.Random(4)
    e, probe = started()
    feed(e, rng, 4)
    e.step()
    victim = e.sched.running[0].request_id
    ids = {b.block_id for b in held_blocks(e, victim)}
    manager = e.sched.kv_cache_manager
    real_free: Callable[..., Any] = manager.free
    manager.free = lambda request: None if request.request_id == victim else real_free(request)
    e.abort([victim])  # the scheduler forgets it; its blocks never go back (PD abort, #46283)
    manager.free = real_free
    while e.sched.requests:
        e.step()
    snap = probe.latest
    deficit = gap(snap.pools[Pool.FULL]) if snap else None
    found = named(snap, TripwireKind.MISSING)
    requests = {r for t in (snap.tripwires if snap else ()) for r in t.requests}
    report(
        "leak_on_abort",
        found == ids and deficit == len(ids) and victim in requests,
        {"ids": sorted(ids), "named": sorted(found), "gap": deficit, "requests": sorted(requests)},
    )
    detach(e.sched)


def check_premature_free() -> None:
    rng = random.Random(5)
    e, probe = started(blocks=120)
    struck = premature_free(e, probe, rng)
    e.step()  # the next boundary samples: a surplus, so the walk runs at once
    snap = probe.latest
    # a block only this request held is now free and held; a shared prefix block is not queued
    # (another request still holds it) but has a reference fewer than its owners
    found = named(snap, TripwireKind.FREE_AND_LIVE, TripwireKind.REF_BELOW_OWNERS)
    surplus = gap(snap.pools[Pool.FULL]) if snap else None
    crash = run_until_assert(e, rng, 400)
    report(
        "premature_free",
        struck.ids <= struck.seen["at_free"] and struck.ids <= found and surplus is not None and surplus < 0,
        {
            "ids": sorted(struck.ids),
            "named_at_free": sorted(struck.seen["at_free"]),
            "named": sorted(found),
            "gap": surplus,
            "vllm_assert": crash,
        },
    )
    detach(e.sched)


def check_plugin() -> None:
    """vLLM's own plugin loader finds the entry point; a Scheduler built afterwards has a probe."""
    import logging
    import os

    from vllm.logger import init_logger
    from vllm.plugins import load_general_plugins

    from poolwatch.probe.lifecycle import probe_of

    os.environ.update(POOLWATCH_PROBE="1", POOLWATCH_PROBE_SERVE="0", VLLM_PLUGINS="poolwatch")
    load_general_plugins()
    e = Engine(64)
    probe = probe_of(e.sched)
    init_logger("vllm.check")  # vLLM's own logging set-up, as its entry points have it
    seen: list[logging.LogRecord] = []
    catcher = logging.Handler()
    catcher.emit = seen.append  # type: ignore[method-assign]
    logging.getLogger("vllm").addHandler(catcher)
    logging.getLogger("poolwatch.probe").warning("poolwatch probe: through vLLM's logger")
    logging.getLogger("vllm").removeHandler(catcher)
    formatted = [r.getMessage() for r in seen] == ["poolwatch probe: through vLLM's logger"]
    e.add("p0", PREFIXES[0][:20], 3)
    while e.sched.requests:
        e.step()
    snap = probe.latest if probe else None
    report(
        "plugin_activation",
        probe is not None and snap is not None and gap(snap.pools[Pool.FULL]) == 0 and formatted,
        {
            "through_vllms_logger": formatted,
            "seq": probe.seq if probe else None,
            "phase": snap.phase.value if snap else None,
        },
    )


def main() -> int:
    from tests.vllm_real.check_free_time import CHECKS as FREE_TIME_CHECKS
    from tests.vllm_real.check_guard import CHECKS as GUARD_CHECKS
    from tests.vllm_real.check_incremental import CHECKS as INCREMENTAL_CHECKS

    checks: list[tuple[str, Callable[[], None]]] = [
        ("clean_run", lambda: check_clean(False)),
        ("clean_run_hybrid", lambda: check_clean(True)),
        ("clean_run_preempting", lambda: check_clean(False, blocks=40)),
        ("double_free", check_double_free),
        ("shared_double_free", check_shared_double_free),
        ("duplicate_in_one_free_42571", check_duplicate_in_one_free),
        ("leak_on_abort", check_leak_on_abort),
        ("premature_free", check_premature_free),
        *GUARD_CHECKS,  # the same faults with guard on: refused, vLLM's pool sound after
        *INCREMENTAL_CHECKS,  # the incremental figures and moves equal a from-scratch recount
        *FREE_TIME_CHECKS,  # the free-time check's verdict equals a from-scratch owner count
        ("plugin_activation", check_plugin),  # last: it wraps the Scheduler class for good
    ]
    return run_all(checks, set(sys.argv[1:]))


if __name__ == "__main__":
    sys.exit(main())
