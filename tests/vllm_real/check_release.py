"""Drive one real vLLM V1 release's Scheduler on CPU with the probe attached; print one JSON line per check.

    <venv>/bin/python tests/vllm_real/check_release.py            (PYTHONPATH=<checkout>/service:<checkout>)

Each fault is injected the way it happens in vLLM (through the block pool's unchecked
``free_blocks`` or the scheduler's own structures), then the loop runs on until vLLM's own assert
fires (or the step budget ends); a check passes when the probe named the exact block ids, and did
so before that assert.
"""

from __future__ import annotations

import random
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from poolwatch.conservation import gap
from poolwatch.model.findings import CallSiteKind, TripwireKind
from poolwatch.model.rank import Pool
from poolwatch.model.snapshot import Snapshot
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.lifecycle import attach, detach
from poolwatch.probe.vllm.engine import VLLM, vllm_release
from poolwatch.probe.vllm.extras import VllmProbe
from tests.vllm_real.harness import (
    VERSION,
    Ticks,
    abort,
    emit,
    make_request,
    make_scheduler,
    run_checks,
    step,
)

CONFIG = ProbeConfig(serve=False, sample_interval_s=0.01, kv_census_interval_s=1.0, idle_kv_census_gap_s=1.0)
PREFIXES = [[random.Random(p).randrange(10, 900) for _ in range(48)] for p in range(4)]


def prompt(rng: random.Random) -> list[int]:
    shared = PREFIXES[rng.randrange(len(PREFIXES))][: rng.choice((16, 32, 48))]
    return shared + [rng.randrange(10, 900) for _ in range(rng.randrange(1, 40))]


def started(hybrid: bool = False, blocks: int = 400, config: ProbeConfig = CONFIG) -> tuple[Any, VllmProbe]:
    sched = make_scheduler(blocks, hybrid=hybrid)
    probe = attach(VLLM, sched, config, release=vllm_release(VERSION))
    probe.clock = Ticks()
    return sched, probe


def feed(sched: Any, rng: random.Random, n: int, prefix: str = "r") -> list[str]:
    rids = []
    for i in range(n):
        rid = f"{prefix}{i}"
        sched.add_request(make_request(rid, prompt(rng), rng.randrange(4, 40)))
        rids.append(rid)
    return rids


def held_blocks(sched: Any, rid: str) -> list[Any]:
    mgr = sched.kv_cache_manager.coordinator.single_type_managers[0]
    return [b for b in mgr.req_to_blocks.get(rid, []) if not b.is_null]


def run_until_assert(sched: Any, rng: random.Random, steps: int) -> str | None:
    """Step on, feeding new requests so the free queue cycles and every block is handed out again;
    the text of vLLM's own assertion when it fires, else None."""
    for i in range(steps):
        if len(sched.waiting) < 4:
            feed(sched, rng, 4, prefix=f"load{i}-")
        try:
            step(sched)
        except AssertionError as exc:
            where = traceback.extract_tb(exc.__traceback__)[-1]
            return f"{Path(where.filename).name}:{where.lineno} {where.line}"
    return None


def named(snap: Snapshot | None, kind: TripwireKind) -> set[int]:
    return {s for t in (snap.tripwires if snap else ()) if t.kind is kind for s in t.slots}


def check_clean(hybrid: bool, blocks: int = 400) -> None:
    """A long clean run; ``blocks`` small enough forces preemptions (their blocks are freed and
    re-allocated on resume) on top of prefix hits, aborts and chunked prefills."""
    rng = random.Random(1)
    sched, probe = started(hybrid, blocks)
    gaps: set[int | None] = set()
    samples = 0
    preempted: set[str] = set()
    feed(sched, rng, 24)
    aborted = 0
    for i in range(1500):
        if i % 7 == 0:
            feed(sched, rng, 3, prefix=f"s{i}-")
        if i % 23 == 0 and sched.running:
            abort(sched, [sched.running[-1].request_id])
            aborted += 1
        step(sched)
        preempted.update(r.request_id for r in sched.waiting if r.status.name == "PREEMPTED")
        snap = probe.latest
        if snap is not None and Pool.FULL in snap.pools:
            gaps.add(gap(snap.pools[Pool.FULL]))
            samples += 1
        if not sched.requests:
            break
    while sched.requests:
        step(sched)
    snap = probe.sample_now("final", census=True)
    ok = snap is not None and snap.tripwires == () and gaps == {0} and gap(snap.pools[Pool.FULL]) == 0
    emit(
        "clean_run" + ("_hybrid" if hybrid else "") + ("_preempting" if blocks < 100 else ""),
        ok,
        preempted=len(preempted),
        steps=i + 1,
        samples=samples,
        censuses=probe.census_total,
        aborted=aborted,
        gaps=sorted(g for g in gaps if g is not None),
        tripwires=[t.kind.value for t in snap.tripwires] if snap else None,
        hits=_hit_blocks(sched),
        coordinator=type(sched.kv_cache_manager.coordinator).__name__,
        managers=[type(m).__name__ for m in sched.kv_cache_manager.coordinator.single_type_managers],
        errors=probe.guard.errors_total,
        last_error=probe.guard.last_error,
    )
    detach(sched)


def _hit_blocks(sched: Any) -> int:
    pool = sched.kv_cache_manager.block_pool
    return sum(1 for b in pool.blocks if b.block_hash is not None)


def check_double_free() -> None:
    rng = random.Random(2)
    sched, probe = started()
    feed(sched, rng, 6)
    step(sched)
    victim = sched.running[0].request_id
    blocks = held_blocks(sched, victim)
    abort(sched, [victim])  # vLLM frees them once
    sched.kv_cache_manager.block_pool.free_blocks(list(reversed(blocks)))  # ... and a stale copy again
    ids = {b.block_id for b in blocks}
    at_free = named(probe.latest, TripwireKind.NEGATIVE_REF)
    crash = run_until_assert(sched, rng, 400)
    emit(
        "double_free", ids <= at_free and bool(ids), ids=sorted(ids), named=sorted(at_free), vllm_assert=crash
    )
    detach(sched)


def check_shared_double_free() -> None:
    """Two requests share a prefix; one's table is freed twice.  The shared blocks drop from 2 to 1
    at the sound free and from 1 to 0 at the double free -- back on the free queue while the other
    request still lists them, and vLLM never asserts.  Named at the second free."""
    rng = random.Random(6)
    sched, probe = started()
    shared = PREFIXES[1][:48]  # three full blocks
    for rid in ("a", "b"):
        sched.add_request(make_request(rid, shared + [rng.randrange(10, 900) for _ in range(5)], 30))
        step(sched)  # b's prefix hit on a's cached blocks
    for _ in range(2):
        step(sched)
    stale = held_blocks(sched, "a")  # a stale copy of a's table (a connector's, say)
    both = {x.block_id for x in stale} & {x.block_id for x in held_blocks(sched, "b")}
    abort(sched, ["a"])  # the sound free
    sound = named(probe.latest, TripwireKind.REF_BELOW_OWNERS)
    sched.kv_cache_manager.block_pool.free_blocks(list(reversed(stale)))  # the double free
    at_free = named(probe.latest, TripwireKind.REF_BELOW_OWNERS)
    refs = sorted(x.ref_cnt for x in stale if x.block_id in both)
    crash = run_until_assert(sched, rng, 200)
    emit(
        "shared_double_free",
        len(both) >= 3 and both <= at_free and not sound,
        shared=sorted(both),
        named_at_free=sorted(at_free),
        named_at_the_sound_free=sorted(sound),
        shared_ref_cnt_after=refs,
        vllm_assert=crash,
    )
    detach(sched)


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
    sched, probe = started()
    feed(sched, rng, 6)
    step(sched)
    victim = sched.running[0].request_id
    mgr = sched.kv_cache_manager.coordinator.single_type_managers[0]
    dup = held_blocks(sched, victim)[-1]
    mgr.req_to_blocks[victim].append(dup)  # #42571: one block listed twice in the list that is freed
    step(sched)
    before = named(probe.latest, TripwireKind.REF_BELOW_OWNERS)
    abort(sched, [victim])
    at_free = named(probe.latest, TripwireKind.REF_BELOW_OWNERS) | named(
        probe.latest, TripwireKind.NEGATIVE_REF
    )
    site = free_site(probe.latest)
    crash = run_until_assert(sched, rng, 400)
    emit(
        "duplicate_in_one_free_42571",
        dup.block_id in at_free and dup.block_id in before and site_in_vllm(site),
        block=dup.block_id,
        named_before_free=sorted(before),
        named_at_free=sorted(at_free),
        ref_cnt=dup.ref_cnt,
        vllm_assert=crash,
        freed_by=site,
    )
    detach(sched)


def check_leak_on_abort() -> None:
    rng = random.Random(4)
    sched, probe = started()
    feed(sched, rng, 4)
    step(sched)
    victim = sched.running[0].request_id
    ids = {b.block_id for b in held_blocks(sched, victim)}
    manager = sched.kv_cache_manager
    real_free: Callable[..., Any] = manager.free
    manager.free = lambda request: None if request.request_id == victim else real_free(request)
    abort(sched, [victim])  # the scheduler forgets it; its blocks never go back (PD abort, #46283)
    manager.free = real_free
    while sched.requests:
        step(sched)
    snap = probe.latest
    deficit = gap(snap.pools[Pool.FULL]) if snap else None
    found = named(snap, TripwireKind.MISSING)
    requests = {r for t in (snap.tripwires if snap else ()) for r in t.requests}
    emit(
        "leak_on_abort",
        found == ids and deficit == len(ids) and victim in requests,
        ids=sorted(ids),
        named=sorted(found),
        gap=deficit,
        requests=sorted(requests),
    )
    detach(sched)


def check_premature_free() -> None:
    rng = random.Random(5)
    sched, probe = started(blocks=120)
    feed(sched, rng, 6)
    step(sched)
    victim = sched.running[0].request_id
    blocks = held_blocks(sched, victim)
    sched.kv_cache_manager.block_pool.free_blocks(list(reversed(blocks)))  # returned while still in use
    ids = {b.block_id for b in blocks}
    at_free = named(probe.latest, TripwireKind.REF_BELOW_OWNERS)  # before any allocation hands one out
    step(sched)  # the next boundary samples: a surplus, so the walk runs at once
    snap = probe.latest
    # a block only this request held is now free and held; a shared prefix block is not queued
    # (another request still holds it) but has a reference fewer than its owners
    found = named(snap, TripwireKind.FREE_AND_LIVE) | named(snap, TripwireKind.REF_BELOW_OWNERS)
    surplus = gap(snap.pools[Pool.FULL]) if snap else None
    crash = run_until_assert(sched, rng, 400)
    emit(
        "premature_free",
        ids <= at_free and ids <= found and surplus is not None and surplus < 0,
        ids=sorted(ids),
        named_at_free=sorted(at_free),
        named=sorted(found),
        gap=surplus,
        vllm_assert=crash,
    )
    detach(sched)


def check_plugin() -> None:
    """vLLM's own plugin loader finds the entry point; a Scheduler built afterwards has a probe."""
    import logging
    import os

    from vllm.plugins import load_general_plugins

    from poolwatch.probe.lifecycle import probe_of

    os.environ.update(POOLWATCH_PROBE="1", POOLWATCH_PROBE_SERVE="0", VLLM_PLUGINS="poolwatch")
    load_general_plugins()
    sched = make_scheduler(64)
    probe = probe_of(sched)
    from vllm.logger import init_logger

    init_logger("vllm.check")  # vLLM's own logging set-up, as its entry points have it
    seen: list[logging.LogRecord] = []
    catcher = logging.Handler()
    catcher.emit = seen.append  # type: ignore[method-assign]
    logging.getLogger("vllm").addHandler(catcher)
    logging.getLogger("poolwatch.probe").warning("poolwatch probe: through vLLM's logger")
    logging.getLogger("vllm").removeHandler(catcher)
    formatted = [r.getMessage() for r in seen] == ["poolwatch probe: through vLLM's logger"]
    sched.add_request(make_request("p0", PREFIXES[0][:20], 3))
    while sched.requests:
        step(sched)
    snap = probe.latest if probe else None
    emit(
        "plugin_activation",
        probe is not None and snap is not None and gap(snap.pools[Pool.FULL]) == 0 and formatted,
        through_vllms_logger=formatted,
        seq=probe.seq if probe else None,
        phase=snap.phase.value if snap else None,
    )


def main() -> int:
    from tests.vllm_real.check_guard import CHECKS as GUARD_CHECKS

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
        ("plugin_activation", check_plugin),  # last: it wraps the Scheduler class for good
    ]
    return run_checks(checks, set(sys.argv[1:]))


if __name__ == "__main__":
    sys.exit(main())
