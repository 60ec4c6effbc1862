"""Guard mode (``POOLWATCH_PROBE_GUARD=1``) on one real vLLM V1 release's Scheduler (CPU); one JSON
line per check, run by ``check_release.py`` beside the read-only checks.

Each fault is injected as the read-only checks inject it (``faults.py``), with guard on.  A check
passes when the probe refused exactly the wrong part of the call, and vLLM's own structures are then
sound by vLLM's own reading, not the probe's (:func:`pool_sound`: every block's ``ref_cnt`` equals
its occurrences in the lists of the requests the scheduler knows, and ``get_all_free_blocks()``
lists exactly the blocks at ``ref_cnt`` 0, each once), no block is in the table of a request that
did not take it, and the engine then runs on -- allocating the whole free queue over and over --
without vLLM's ``assert block.ref_cnt == 0`` ever firing.  A long clean run with guard on refuses
nothing.
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
from rigs.checks import report
from rigs.vllm.engine import Engine
from tests.vllm_real.faults import (
    CONFIG,
    Fault,
    clean_run,
    double_free,
    duplicate_in_one_free,
    premature_free,
    run_until_assert,
    shared_double_free,
    started,
)

__all__ = ["CHECKS", "pool_sound"]

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


def drain(e: Engine, steps: int = 3000) -> str | None:
    """Step until no request is left; the text of vLLM's assertion if one fires."""
    for _ in range(steps):
        if not e.sched.requests:
            return None
        try:
            e.step()
        except AssertionError as exc:
            return f"{type(exc).__name__}: {exc}"
    return None


def after(e: Engine, probe: VllmProbe, rng: random.Random) -> dict[str, Any]:
    """Run on after the fault (feeding requests, so the whole free queue is handed out again and
    again), then drain; what vLLM's structures, vLLM's assert and the probe say."""
    sound_now = pool_sound(e.sched)
    crash = run_until_assert(e, rng, RUN_ON) or drain(e)
    snap = probe.sample_now("final", census=True)
    return {
        "sound_after_refusal": sound_now,
        "vllm_assert": crash,
        "sound_at_end": pool_sound(e.sched),
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
    e, probe = started(GUARD, hybrid=hybrid, blocks=blocks)
    run = clean_run(e, probe)
    snap = run.final
    health = snap.probe if snap else None
    sound = pool_sound(e.sched)
    report(
        "guard_clean_run" + ("_hybrid" if hybrid else "_preempting"),
        refusals(probe) == 0
        and snap is not None
        and not snap.tripwires
        and bool(health and health.guard)
        and sound == {},
        {
            "refusals": refusals(probe),
            "guard": health.guard if health else None,
            "preempted": len(run.preempted),
            "managers": [type(m).__name__ for m in e.sched.kv_cache_manager.coordinator.single_type_managers],
            "sound": sound,
            "errors": probe.guard.errors_total,
        },
    )
    detach(e.sched)


def guarded(name: str, fault: Fault, seed: int, blocks: int, ok: Callable[[Any, VllmProbe], bool]) -> None:
    """``fault`` with guard on: refused exactly, vLLM's pool sound after (and ``ok`` of what it struck)."""
    rng = random.Random(seed)
    e, probe = started(GUARD, blocks=blocks)
    struck = fault(e, probe, rng)
    extra = ok(struck, probe)
    owners = [r.requests for r in probe.repairs.all()]
    result = after(e, probe, rng)
    report(
        name,
        ok_after(result) and refused(probe) == struck.ids and extra,
        {"ids": sorted(struck.ids), "refused": sorted(refused(probe)), "requests": owners, **result},
    )
    detach(e.sched)


CHECKS: list[tuple[str, Callable[[], None]]] = [
    ("guard_clean_run_preempting", lambda: check_guard_clean(False, 40)),
    ("guard_clean_run_hybrid", lambda: check_guard_clean(True, 400)),
    ("guard_double_free", lambda: guarded("guard_double_free", double_free, 2, 400, lambda s, p: True)),
    (
        "guard_shared_double_free",  # refused: b keeps its prefix
        lambda: guarded(
            "guard_shared_double_free",
            shared_double_free,
            6,
            400,
            lambda s, p: len(s.seen["shared"]) >= 3 and s.seen["shared_refs"] == [1] * len(s.seen["shared"]),
        ),
    ),
    (
        "guard_duplicate_in_one_free_42571",  # one occurrence of the two is handed on
        lambda: guarded(
            "guard_duplicate_in_one_free_42571",
            duplicate_in_one_free,
            3,
            400,
            lambda s, p: refusals(p) == 1 and bool(s.seen["kinds_before"]),
        ),
    ),
    (
        "guard_premature_free",  # refused: the request runs on
        lambda: guarded(
            "guard_premature_free", premature_free, 5, 120, lambda s, p: all(b.ref_cnt >= 1 for b in s.blocks)
        ),
    ),
]
