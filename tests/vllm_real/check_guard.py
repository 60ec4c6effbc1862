"""Guard mode (``POOLWATCH_PROBE_GUARD=1``) on one real vLLM V1 release's Scheduler (CPU); one JSON
line per check, run by ``check_release.py`` beside the read-only checks.

Each fault is injected as ``check_release.py`` injects it, with guard on.  A check passes when the
probe refused exactly the wrong part of the call, and vLLM's own structures are then sound by
vLLM's own reading, not the probe's (:func:`pool_sound`: every block's ``ref_cnt`` equals its
occurrences in the lists of the requests the scheduler knows, and ``get_all_free_blocks()`` lists
exactly the blocks at ``ref_cnt`` 0, each once), no block is in the table of a request that did not
take it, and the engine then runs on -- allocating the whole free queue over and over -- without
vLLM's ``assert block.ref_cnt == 0`` ever firing.  A long clean run with guard on refuses nothing.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from poolwatch.conservation import gap
from poolwatch.model.findings import RepairKind
from poolwatch.model.rank import Pool
from poolwatch.probe.lifecycle import detach
from poolwatch.probe.vllm.extras import VllmProbe
from tests.vllm_real.check_release import (
    CONFIG,
    PREFIXES,
    abort,
    feed,
    held_blocks,
    make_request,
    run_until_assert,
    started,
    step,
)
from tests.vllm_real.harness import emit

GUARD = replace(CONFIG, guard=True)
RUN_ON = 600  # steps after the fault, feeding requests: the free queue is handed out many times over


def pool_sound(sched: Any) -> dict[str, Any]:
    """What is wrong with vLLM's block pool by its own structures (empty: nothing)."""
    pool = sched.kv_cache_manager.block_pool
    owners: Counter[int] = Counter()
    for mgr in sched.kv_cache_manager.coordinator.single_type_managers:
        for rid, blocks in mgr.req_to_blocks.items():
            if rid in sched.requests:
                owners.update(b.block_id for b in blocks if not b.is_null)
    for _fence, blocks in getattr(sched, "deferred_frees", ()):
        owners.update(b.block_id for b in blocks if not b.is_null)
    free = [b.block_id for b in pool.free_block_queue.get_all_free_blocks()]
    out: dict[str, Any] = {}
    wrong = {b.block_id: (b.ref_cnt, owners[b.block_id]) for b in pool.blocks if not b.is_null}
    wrong = {i: pair for i, pair in wrong.items() if pair[0] != pair[1]}
    if wrong:
        out["ref_cnt_vs_owners"] = dict(list(wrong.items())[:8])
    if len(free) != len(set(free)) or len(free) != pool.free_block_queue.num_free_blocks:
        out["queue"] = {
            "walked": len(free),
            "distinct": len(set(free)),
            "counter": pool.get_num_free_blocks(),
        }
    at_zero = {b.block_id for b in pool.blocks if not b.is_null and b.ref_cnt == 0}
    if set(free) != at_zero:
        out["queue_vs_zero"] = sorted(set(free) ^ at_zero)[:8]
    return out


def refused(probe: VllmProbe) -> set[int]:
    return {s for r in probe.repairs.all() if r.kind is RepairKind.REFUSE for s in r.slots}


def refusals(probe: VllmProbe) -> int:
    return sum(r.count for r in probe.repairs.all() if r.kind is RepairKind.REFUSE)


def guarded(**kw: Any) -> tuple[Any, VllmProbe]:
    return started(config=GUARD, **kw)


def drain(sched: Any, steps: int = 3000) -> str | None:
    """Step until no request is left; the text of vLLM's assertion if one fires."""
    for _ in range(steps):
        if not sched.requests:
            return None
        try:
            step(sched)
        except AssertionError as exc:
            return f"{type(exc).__name__}: {exc}"
    return None


def after(sched: Any, probe: VllmProbe, rng: random.Random) -> dict[str, Any]:
    """Run on after the fault (feeding requests, so the whole free queue is handed out again and
    again), then drain; what vLLM's structures, vLLM's assert and the probe say."""
    sound_now = pool_sound(sched)
    crash = run_until_assert(sched, rng, RUN_ON) or drain(sched)
    snap = probe.sample_now("final", census=True)
    return {
        "sound_after_refusal": sound_now,
        "vllm_assert": crash,
        "sound_at_end": pool_sound(sched),
        "tripwires": [t.kind.value for t in snap.tripwires] if snap else None,
        "gap": gap(snap.pools[Pool.FULL]) if snap else None,
    }


def ok_after(result: dict[str, Any]) -> bool:
    return (
        result["sound_after_refusal"] == {}
        and result["vllm_assert"] is None
        and result["sound_at_end"] == {}
        and result["tripwires"] == []
        and result["gap"] == 0
    )


def check_guard_clean(hybrid: bool, blocks: int) -> None:
    """1,500 steps (prefix hits, chunked prefill, aborts; full + Mamba, or a pool small enough to
    preempt), guard on: 0 refusals, no finding, vLLM's pool sound at the end."""
    rng = random.Random(1)
    sched, probe = guarded(hybrid=hybrid, blocks=blocks)
    feed(sched, rng, 24)
    preempted: set[str] = set()
    for i in range(1500):
        if i % 7 == 0:
            feed(sched, rng, 3, prefix=f"s{i}-")
        if i % 23 == 0 and sched.running:
            abort(sched, [sched.running[-1].request_id])
        step(sched)
        preempted.update(r.request_id for r in sched.waiting if r.status.name == "PREEMPTED")
    while sched.requests:
        step(sched)
    snap = probe.sample_now("final", census=True)
    health = snap.probe if snap else None
    sound = pool_sound(sched)
    emit(
        "guard_clean_run" + ("_hybrid" if hybrid else "_preempting"),
        refusals(probe) == 0
        and snap is not None
        and not snap.tripwires
        and bool(health and health.guard)
        and sound == {},
        refusals=refusals(probe),
        guard=health.guard if health else None,
        preempted=len(preempted),
        managers=[type(m).__name__ for m in sched.kv_cache_manager.coordinator.single_type_managers],
        sound=sound,
        errors=probe.guard.errors_total,
    )
    detach(sched)


def check_guard_double_free() -> None:
    rng = random.Random(2)
    sched, probe = guarded()
    feed(sched, rng, 6)
    step(sched)
    victim = sched.running[0].request_id
    blocks = held_blocks(sched, victim)
    abort(sched, [victim])
    sched.kv_cache_manager.block_pool.free_blocks(list(reversed(blocks)))  # refused
    ids = {b.block_id for b in blocks}
    result = after(sched, probe, rng)
    emit(
        "guard_double_free",
        ok_after(result) and refused(probe) == ids,
        ids=sorted(ids),
        refused=sorted(refused(probe)),
        **result,
    )
    detach(sched)


def check_guard_shared_double_free() -> None:
    rng = random.Random(6)
    sched, probe = guarded()
    shared = PREFIXES[1][:48]
    for rid in ("a", "b"):
        sched.add_request(make_request(rid, shared + [rng.randrange(10, 900) for _ in range(5)], 30))
        step(sched)
    for _ in range(2):
        step(sched)
    stale = held_blocks(sched, "a")
    both = {x.block_id for x in stale} & {x.block_id for x in held_blocks(sched, "b")}
    abort(sched, ["a"])
    sched.kv_cache_manager.block_pool.free_blocks(list(reversed(stale)))  # refused: b keeps its prefix
    kept = sorted(x.ref_cnt for x in stale if x.block_id in both)
    owners = [r.requests for r in probe.repairs.all()]
    result = after(sched, probe, rng)
    emit(
        "guard_shared_double_free",
        ok_after(result)
        and len(both) >= 3
        and refused(probe) == {x.block_id for x in stale}
        and kept == [1] * len(both),
        shared=sorted(both),
        refused=sorted(refused(probe)),
        shared_ref_cnt_after=kept,
        requests=owners,
        **result,
    )
    detach(sched)


def check_guard_duplicate_in_one_free() -> None:
    rng = random.Random(3)
    sched, probe = guarded()
    feed(sched, rng, 6)
    step(sched)
    victim = sched.running[0].request_id
    mgr = sched.kv_cache_manager.coordinator.single_type_managers[0]
    dup = held_blocks(sched, victim)[-1]
    mgr.req_to_blocks[victim].append(dup)  # #42571
    step(sched)  # the walk at this boundary names it first (a DoubleFree page until the free)
    before = [t.kind.value for t in (probe.latest.tripwires if probe.latest else ())]
    abort(sched, [victim])  # one occurrence of the two is handed on
    result = after(sched, probe, rng)
    emit(
        "guard_duplicate_in_one_free_42571",
        ok_after(result) and refused(probe) == {dup.block_id} and refusals(probe) == 1 and bool(before),
        block=dup.block_id,
        named_before_free=before,
        refused=sorted(refused(probe)),
        **result,
    )
    detach(sched)


def check_guard_premature_free() -> None:
    rng = random.Random(5)
    sched, probe = guarded(blocks=120)
    feed(sched, rng, 6)
    step(sched)
    victim = sched.running[0].request_id
    blocks = held_blocks(sched, victim)
    sched.kv_cache_manager.block_pool.free_blocks(list(reversed(blocks)))  # refused: the request runs on
    ids = {b.block_id for b in blocks}
    kept = all(b.ref_cnt >= 1 for b in blocks)
    result = after(sched, probe, rng)
    emit(
        "guard_premature_free",
        ok_after(result) and refused(probe) == ids and kept,
        ids=sorted(ids),
        refused=sorted(refused(probe)),
        requests=[r.requests for r in probe.repairs.all()],
        **result,
    )
    detach(sched)


CHECKS: list[tuple[str, Callable[[], None]]] = [
    ("guard_clean_run_preempting", lambda: check_guard_clean(False, 40)),
    ("guard_clean_run_hybrid", lambda: check_guard_clean(True, 400)),
    ("guard_double_free", check_guard_double_free),
    ("guard_shared_double_free", check_guard_shared_double_free),
    ("guard_duplicate_in_one_free_42571", check_guard_duplicate_in_one_free),
    ("guard_premature_free", check_guard_premature_free),
]
