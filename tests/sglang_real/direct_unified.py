"""The unified tree's releases' own accounting (0.5.17, 0.5.19, 0.5.23) on requests that hold a row,
KV and a Mamba slot straight from the pools (no tree): the probe against SGLang's busy-time uncached
sum and its invariant checker, a live slot freed behind its back (named; with guard v1,
quarantined), and, where the release has it (``Release.checkpoints``), SGLang's int8 Mamba
checkpoint pool (the tree's states in it, a checkpoint slot freed behind the tree's back, a lost
one).  The request's fields sit where the release keeps them (:meth:`~rigs.sglang.steps.Steps.record`).
The prefix-tree flows run through :mod:`rigs.sglang.driver` in ``scenarios.py``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from poolwatch.model.findings import TripwireKind
from poolwatch.model.rank import Pool
from rigs.checks import report
from rigs.sglang.driver import Driver, gaps
from tests.sglang_real.agreement import agrees_at_idle, agrees_while_busy

__all__ = ["direct_scenarios"]


def take(d: Driver, rid: str, prompt: int) -> Any:
    """A prefilled request holding a row, ``prompt`` private KV slots and a Mamba slot."""
    s = d.sched
    req = d.arrive(rid, list(range(prompt)))
    if not d.release.tree_lock:  # 0.5.17 - 0.5.21 release it by dec_lock_ref(last_node): the root's, locked
        req.init_next_round_input(s.tree_cache)
        s.tree_cache.inc_lock_ref(req.last_node)
    d.record(req).mamba_pool_idx = s.req_to_token_pool.mamba_allocator.alloc(1)[0]
    row = s.req_to_token_pool.alloc([req])[0]
    s.req_to_token_pool.write((row, slice(0, prompt)), s.token_to_kv_pool_allocator.alloc(prompt))
    if req.kv is None:  # 0.5.17 - 0.5.18: alloc_for_extend makes the request's ReqKvInfo
        from sglang.srt.managers.schedule_batch import ReqKvInfo

        req.kv = ReqKvInfo(kv_allocated_len=prompt, swa_evicted_seqlen=0)
    d._grown(req, prompt)
    req.output_ids.append(7)
    s.running_batch.reqs.append(req)
    s.last_batch = s.running_batch
    return req


def give_back(d: Driver, req: Any) -> None:
    """Everything back through the pools (no tree insert)."""
    from sglang.srt.managers.schedule_batch import FINISH_LENGTH

    s, held = d.sched, d.record(req)
    req.finished_reason = FINISH_LENGTH(1)
    s.token_to_kv_pool_allocator.free(s.req_to_token_pool.req_to_token[held.req_pool_idx, : d.allocated(req)])
    s.req_to_token_pool.mamba_allocator.free(held.mamba_pool_idx.unsqueeze(-1))
    held.mamba_pool_idx = None
    s.req_to_token_pool.free(req)
    s.running_batch.reqs.remove(req)


def busy_then_idle(d: Driver) -> None:
    d.new()
    a = take(d, "a", 10)
    agrees_while_busy(d, "one running request")
    b = take(d, "b", 6)
    agrees_while_busy(d, "two running requests")
    snap, held = d.boundary(), d.record(a)
    report(
        f"{d.release.version} ids: Mamba slots and request rows start at 1",
        int(held.mamba_pool_idx) >= 1 and held.req_pool_idx >= 1 and snap.pools[Pool.MAMBA].held == 2,
        {"mamba": int(held.mamba_pool_idx), "row": held.req_pool_idx},
    )
    give_back(d, a)
    give_back(d, b)
    d.sched.last_batch = None
    agrees_at_idle(d, "after releasing both")


def freed_behind_its_back(d: Driver, *, guard: bool) -> None:
    """A live slot freed behind its back: named by the census (guard off), or taken off the free
    list at the next boundary (guard v1's quarantine); SGLang's checker agrees either way."""
    s = d.new(guard=guard)
    a = take(d, "a", 8)
    slot = int(d.record(a).mamba_pool_idx)
    s.req_to_token_pool.mamba_allocator.free(d.record(a).mamba_pool_idx.unsqueeze(-1))  # the fault
    snap = d.boundary()
    if guard:
        free = [int(i) for i in s.req_to_token_pool.mamba_allocator.free_slots.tolist()]
        repairs = [(r.kind.value, r.slots, r.requests) for r in snap.repairs]
        report(
            f"{d.release.version} guard: the live slot is taken off mamba_allocator's free list, the pool "
            "balances",
            slot not in free and gaps(snap)["mamba"] == 0 and repairs == [("quarantine", (slot,), ("a",))],
            {"slot": slot, "repairs": repairs, "gaps": gaps(snap)},
        )
    else:
        wires = [(t.kind, t.pool, t.slots) for t in snap.tripwires]
        report(
            "injected double free: the census names the live slot on mamba_allocator's free list",
            (TripwireKind.FREE_AND_LIVE, Pool.MAMBA, (slot,)) in wires
            and gaps(snap)["mamba"] == -1
            and gaps(snap)["full"] == 0,
            {"tripwires": [str(w) for w in wires], "gaps": gaps(snap)},
        )
    give_back(d, a)
    s.last_batch = None
    leak = agrees_at_idle(d, "guarded" if guard else "injected double free at idle")
    said = "finds nothing at idle" if guard else "finds it at idle"
    who = f"{d.release.version}{' guard' if guard else ''}"
    report(f"{who}: SGLang's invariant checker {said}", leak != guard)


def int8_checkpoints(d: Driver) -> None:
    s = d.new(checkpoints=True)
    ckpt = s.req_to_token_pool.mamba_ckpt_pool
    a = take(d, "a", 10)
    take(d, "b", 6)
    agrees_while_busy(d, "int8 checkpoints, two running requests")
    d.finish(a)  # SGLang's own release with a checkpoint: the tree keeps the state in the int8 pool
    snap = d.boundary()
    tree = s.tree_cache.mamba_evictable_size() + s.tree_cache.mamba_protected_size()
    active, checkpoints = snap.pools[Pool.MAMBA], snap.pools.get(Pool.MAMBA_CKPT)
    usual = active.available + tree + active.held - active.size  # the tree's states read as active
    report(
        "int8 checkpoints: a finished request's state is cached in the checkpoint pool; the probe reads the "
        "active pool with evictable 0 and the checkpoint pool as SGLang's mamba-int8 check",
        tree == 1
        and checkpoints is not None
        and (checkpoints.size, checkpoints.available, checkpoints.evictable)
        == (ckpt.num_slots, ckpt.available_size(), 1)
        and active.evictable == 0
        and gaps(snap)["mamba"] == 0
        and gaps(snap)["mamba_ckpt"] == 0
        and usual == tree
        and not snap.tripwires,
        {"gaps": gaps(snap), "usual_reading_surplus": usual, "tripwires": [str(t) for t in snap.tripwires]},
    )
    for req in list(s.running_batch.reqs):
        give_back(d, req)
    s.last_batch = None
    leak = agrees_at_idle(d, "int8 checkpoints at idle, the tree holding one checkpoint")
    report("int8 checkpoints: SGLang's two Mamba checks pass at idle, as the probe says", not leak)
    held = s.tree_cache.all_mamba_values_flatten()[:1].clone()
    ckpt.free(held)  # a checkpoint slot the tree holds, freed behind its back (guard off)
    _named_at_idle(
        d,
        "a tree-held checkpoint slot on the free list",
        "int8 checkpoints, named by slot id: a tree-held checkpoint slot on the free list is a surplus of 1 "
        "on mamba_ckpt and the census names it (free_and_tree), as for the active pool",
        {"mamba_ckpt": -1},
        (TripwireKind.FREE_AND_TREE, Pool.MAMBA_CKPT, (int(held[0]),)),
    )
    ckpt.allocator.free_slots = ckpt.allocator.free_slots[:-1]  # undo it: the same state as before
    lost = ckpt.alloc(1)  # a checkpoint slot nobody owns: the fault class the int8 check exists for
    _named_at_idle(
        d,
        "a lost checkpoint slot",
        "int8 checkpoints: a lost checkpoint slot is a deficit of 1 on mamba_ckpt only, as SGLang says, "
        "and the census names the slot at idle (missing)",
        {"mamba_ckpt": 1, "mamba": 0},
        (TripwireKind.MISSING, Pool.MAMBA_CKPT, (int(lost[0]),)),
    )


def _named_at_idle(d: Driver, fault: str, label: str, gap: dict[str, int], wire: tuple[Any, ...]) -> None:
    """After ``fault``, at the next idle boundary SGLang finds a leak, the pools show ``gap`` and the
    census names ``wire`` (kind, pool, slots)."""
    leak = agrees_at_idle(d, f"int8 checkpoints: {fault}")
    snap = d.probe.latest
    assert snap is not None
    found = gaps(snap)
    wires = [(t.kind, t.pool, t.slots) for t in snap.tripwires]
    report(
        label,
        leak and all(found[k] == v for k, v in gap.items()) and wire in wires,
        {"gaps": found, "slots": wire[2], "tripwires": [str(w) for w in wires]},
    )


def direct_scenarios(d: Driver) -> list[tuple[str, Callable[[], Any]]]:
    out: list[tuple[str, Callable[[], Any]]] = [
        ("busy then idle, straight from the pools", lambda: busy_then_idle(d)),
        ("seed double free, straight from the pools", lambda: freed_behind_its_back(d, guard=False)),
        ("guard mode", lambda: freed_behind_its_back(d, guard=True)),
    ]
    if d.release.checkpoints:  # (SGLang's MambaCheckpointPool: 0.5.17 on)
        out.append(("int8 Mamba checkpoints", lambda: int8_checkpoints(d)))
    return out
