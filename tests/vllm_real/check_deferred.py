"""Deferred frees on real vLLM 0.33.0's Scheduler (CPU), with the probe attached; one JSON line per check.

    <venv>/bin/python -m tests.vllm_real.check_deferred       (rigs.venv.Venv.run sets PYTHONPATH)

0.33.0 defers a request's block free (``Scheduler.deferred_frees``, ``(fence step, blocks)``) only
when a step may still write the blocks and a consumer KV connector could refill them:
``defer_block_free`` is set when ``kv_transfer_config.is_kv_consumer`` and ``max_concurrent_batches
> 1`` (async scheduling, or pipeline parallelism).  So the scheduler here
(:class:`rigs.vllm.engine.Engine`) is vLLM's own ``AsyncScheduler`` with ``async_scheduling`` on and
vLLM's ``ExampleConnector`` (role ``kv_both``, an empty storage directory: it never loads, so no
block is pinned), stepped as EngineCore's batch queue steps it: step N+1 is scheduled before step
N's output is applied.  A request that finishes in step N's update (or is aborted) while step N+1
still lists it has its blocks popped onto the deferred queue, and they return to the pool when step
N+1's output arrives.
"""

from __future__ import annotations

import random
import sys
import tempfile
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from poolwatch.conservation import gap
from poolwatch.model.findings import TripwireKind
from poolwatch.model.rank import Pool
from poolwatch.probe.lifecycle import detach
from poolwatch.probe.vllm.extras import VllmProbe
from rigs.checks import report, run_all
from rigs.vllm.engine import Engine
from tests.vllm_real.faults import CONFIG, named, run_until_assert


def started(guard: bool = False) -> tuple[Engine, VllmProbe]:
    """vLLM's AsyncScheduler with async scheduling and a consumer KV connector (vLLM's own
    ExampleConnector, an empty storage directory): it defers frees."""
    connector = {
        "kv_connector": "ExampleConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"shared_storage_path": tempfile.mkdtemp(prefix="kv-store-")},
    }
    e = Engine(200, batch_queue=2, connector=connector)
    return e, e.attach(replace(CONFIG, guard=guard))


def feed(e: Engine, rng: random.Random, n: int, prefix: str) -> None:
    shared = [rng.randrange(10, 900) for _ in range(32)]
    for i in range(n):
        tail = [rng.randrange(10, 900) for _ in range(rng.randrange(1, 40))]
        e.add(f"{prefix}{i}", shared[: rng.choice((0, 16, 32))] + tail, rng.randrange(2, 24))


def deferred_ids(sched: Any) -> set[int]:
    return {b.block_id for _fence, blocks in sched.deferred_frees for b in blocks}


def until_deferred(e: Engine, rng: random.Random, steps: int = 200) -> int:
    """Step (feeding), aborting a running request while its step is in flight, until the deferred
    queue holds blocks (the next output drains it); the steps it took."""
    for i in range(steps):
        if len(e.sched.waiting) < 2:
            feed(e, rng, 4, prefix=f"d{i}-")
        e.step()
        if e.sched.running and e.pending:
            e.abort([e.sched.running[-1].request_id])
        if deferred_ids(e.sched):
            return i + 1
    raise AssertionError(
        f"no free was deferred in {steps} steps (defer_block_free={e.sched.defer_block_free})"
    )


def check_clean() -> None:
    """A long run in which frees are deferred: the census counts those blocks as the deferred
    queue's (owners ``deferred@<fence>``): no finding, no pin, gap 0, at every look."""
    rng = random.Random(11)
    e, probe = started()
    sched = e.sched
    walks_with_deferred = max_deferred = aborted = 0
    bad: list[dict[str, Any]] = []
    for i in range(600):
        if i % 5 == 0:
            feed(e, rng, 3, prefix=f"c{i}-")
        e.step()
        if i % 3 == 0 and sched.running:
            e.abort([sched.running[-1].request_id])  # while a step that lists it is in flight
            aborted += 1
        waiting_free = deferred_ids(sched)  # the next output drains them
        if not waiting_free:
            continue
        snap = probe.sample_now("deferred", census=True)  # a full walk while blocks wait on the queue
        pool = (probe.census or {}).get("pools", [{}])[0]
        walks_with_deferred += 1
        max_deferred = max(max_deferred, len(waiting_free))
        account = snap.pools.get(Pool.FULL) if snap else None
        if snap is None or account is None or snap.tripwires or gap(account) != 0 or pool.get("pinned"):
            bad.append({"step": i, "gap": gap(account) if account else None, "pool": pool})
    e.settle()
    while sched.requests:
        e.step()
    e.settle()
    final = probe.sample_now("final", census=True)
    ok = not bad and walks_with_deferred > 0 and final is not None and not final.tripwires
    report(
        "deferred_frees_clean",
        ok and not sched.deferred_frees,
        {
            "defer_block_free": sched.defer_block_free,
            "scheduler": type(sched).__name__,
            "connector": type(sched.connector).__name__,
            "walks_with_deferred": walks_with_deferred,
            "max_deferred_blocks": max_deferred,
            "aborted": aborted,
            "bad": bad[:3],
            "errors": probe.guard.errors_total,
            "last_error": probe.guard.last_error,
        },
    )
    detach(e.sched)


def check_freed_while_deferred() -> None:
    """The #45357 class: blocks go back to the pool while a step may still write them, and the
    deferred entry stays, so the drain frees them again.  Every block is named at the next look
    (free and held, or fewer references than owners, owner ``deferred@<fence>``); those the entry
    held alone are named again inside the drain's ``free_blocks`` (freed at ``ref_cnt`` 0), all
    before vLLM's own assert."""
    rng = random.Random(12)
    e, probe = started()
    sched = e.sched
    until_deferred(e, rng)
    fence, blocks = sched.deferred_frees[0]
    ids = {b.block_id for b in blocks if not b.is_null}
    lone = {b.block_id for b in blocks if not b.is_null and b.ref_cnt == 1}  # the entry's alone
    sched.kv_cache_manager.block_pool.free_blocks(list(reversed(blocks)))  # the early free
    probe.on_step("schedule")  # the hook before the next schedule: look before anything else changes
    snap = probe.latest
    early = named(snap, TripwireKind.FREE_AND_LIVE, TripwireKind.REF_BELOW_OWNERS)
    owners = {r for t in (snap.tripwires if snap else ()) for r in t.requests}
    e.settle()  # the drain frees the same blocks again
    at_drain = named(probe.latest, TripwireKind.NEGATIVE_REF)
    crash = run_until_assert(e, rng, 400, load=feed)
    report(
        "deferred_freed_early",
        bool(lone) and ids <= early and f"deferred@{fence}" in owners and lone <= at_drain,
        {
            "ids": sorted(ids),
            "lone": sorted(lone),
            "named_at_look": sorted(early),
            "owners": sorted(owners),
            "named_at_drain": sorted(at_drain),
            "gap": gap(snap.pools[Pool.FULL]) if snap else None,
            "vllm_assert": crash,
        },
    )
    detach(e.sched)


def check_guard_freed_while_deferred() -> None:
    """The same early free with guard on: refused inside ``free_blocks`` (the deferred entry still
    owns every block), so the drain's free is the only one; vLLM's pool is sound by its own
    structures after the refusal and after the drain, and its assert never fires."""
    from tests.vllm_real.check_guard import pool_sound

    rng = random.Random(12)
    e, probe = started(guard=True)
    sched = e.sched
    until_deferred(e, rng)
    fence, blocks = sched.deferred_frees[0]
    ids = {b.block_id for b in blocks if not b.is_null}
    sched.kv_cache_manager.block_pool.free_blocks(list(reversed(blocks)))  # the early free: refused
    refused = {s for r in probe.repairs.all() for s in r.slots}
    owners = {o for r in probe.repairs.all() for o in r.requests}
    sound_now = pool_sound(sched)
    e.settle()  # the drain: the one free of these blocks
    crash = run_until_assert(e, rng, 400, load=feed)
    e.settle()
    final = probe.sample_now("final", census=True)
    report(
        "guard_deferred_freed_early",
        refused == ids
        and f"deferred@{fence}" in owners
        and sound_now == {}
        and crash is None
        and pool_sound(sched) == {}
        and final is not None
        and not final.tripwires,
        {
            "ids": sorted(ids),
            "refused": sorted(refused),
            "owners": sorted(owners),
            "sound_after_refusal": sound_now,
            "vllm_assert": crash,
            "sound_at_end": pool_sound(sched),
            "tripwires": [t.kind.value for t in final.tripwires] if final else None,
        },
    )
    detach(e.sched)


def check_entry_lost() -> None:
    """A deferred entry dropped (its blocks never return): a deficit of exactly those blocks.  With
    a KV connector attached (the only way 0.33.0 defers), a block held beyond its owners may be a
    connector's pin, so the walk counts them as pinned and names no id: the gap is the finding."""
    rng = random.Random(13)
    e, probe = started()
    sched = e.sched
    until_deferred(e, rng)
    _fence, blocks = sched.deferred_frees.popleft()
    listed = {b.block_id for b in blocks if not b.is_null}
    ids = {b.block_id for b in blocks if not b.is_null and b.ref_cnt == 1}  # held by that entry alone
    snap = probe.sample_now("lost", census=True)
    pool = (probe.census or {}).get("pools", [{}])[0]
    deficit = gap(snap.pools[Pool.FULL]) if snap else None
    report(
        "deferred_entry_lost",
        bool(ids) and deficit == len(ids) and pool.get("pinned") == len(listed),
        {
            "ids": sorted(ids),
            "listed": sorted(listed),
            "gap": deficit,
            "pinned": pool.get("pinned"),
            "named": sorted(named(snap, TripwireKind.MISSING)),
        },
    )
    detach(e.sched)


def main() -> int:
    checks: list[tuple[str, Callable[[], None]]] = [
        ("deferred_frees_clean", check_clean),
        ("deferred_freed_early", check_freed_while_deferred),
        ("deferred_entry_lost", check_entry_lost),
        ("guard_deferred_freed_early", check_guard_freed_while_deferred),
    ]
    return run_all(checks, set(sys.argv[1:]))


if __name__ == "__main__":
    sys.exit(main())
