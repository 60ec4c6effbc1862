"""Guard v2 on every pool of a 0.5.23 rank, on SGLang 0.5.23's own classes.

0.5.23's scheduler flow through its real pieces: ``init_next_round_input`` (the prefix match on
``UnifiedRadixCache``, copy-on-write Mamba), ``tree_cache.lock``, ``HybridReqToTokenPool.alloc``,
``checkpoint_kv_cache`` at each chunk boundary, ``release_kv_cache`` (with and without the tree
checkpoint), ``tree_cache.evict`` -- on the tree core SGLang picks (its Rust core where it runs) and,
for the checkpoint pool, SGLang's own ``MambaCheckpointPool``.  As for the older families
(``guard_pools.py``): each wrong free runs three ways (fixed path, guard off, guard on) and with
guard on SGLang's free lists, rows and tree equal the fixed path's right after it and at the end and
its invariant checker passes; a long healthy flow refuses and repairs nothing.
"""

from __future__ import annotations

import array
from dataclasses import replace
from typing import Any

from check_release import CONFIG, gaps, report
from drive_0523 import Driver0523
from sglang.srt.managers.schedule_batch import FINISH_ABORT, FINISH_LENGTH, Req
from sglang.srt.mem_cache.base_prefix_cache import EvictParams
from sglang.srt.mem_cache.common import checkpoint_kv_cache, release_kv_cache
from sglang.srt.sampling.sampling_params import SamplingParams

from poolwatch.probe.lifecycle import attach, detach, probe_of
from poolwatch.probe.sglang.engine import SGLANG

__all__ = ["guard_0523_pool_checks"]


class Rig0523:
    """The scheduler's steps on 0.5.23's pools and tree."""

    def __init__(self, *, guard: bool, checkpoints: bool = False) -> None:
        self.driver = Driver0523()
        self.sched = s = self.driver.with_checkpoints() if checkpoints else self.driver.new()
        detach(s)
        attach(SGLANG, s, replace(CONFIG, guard=guard), serve=False)

    def boundary(self) -> Any:
        return self.driver.boundary()

    def arrive(self, rid: str, ids: list[int]) -> Req:
        req = Req(rid, "", ids, SamplingParams(max_new_tokens=4))
        req.origin_input_ids = array.array(req.output_ids.typecode, req.origin_input_ids)
        return req

    def _room(self, tokens: int) -> None:
        s = self.sched
        short = tokens - s.token_to_kv_pool_allocator.available_size()
        mamba = 2 - s.req_to_token_pool.mamba_allocator.available_size()
        if short > 0 or mamba > 0:
            s.tree_cache.evict(EvictParams(num_tokens=max(short, 0), mamba_num=max(mamba, 0)))

    def extend(self, req: Req, upto: int) -> None:
        """prepare_for_extend: the match (a new request), the row, the prefix and the new KV."""
        s = self.sched
        self._room(upto + 8)
        if not req.kv.holds_kv:
            req.init_next_round_input(s.tree_cache)
            req.lock = s.tree_cache.lock(req.last_node)
        pre = req.prefix_len
        row = s.req_to_token_pool.alloc([req])[0]
        if not req.kv.kv_allocated_len and pre:
            s.req_to_token_pool.write((row, slice(0, pre)), s.tree_cache.prefix_device_indices(req))
        start = max(req.kv.kv_allocated_len, pre)
        s.req_to_token_pool.write((row, slice(start, upto)), s.token_to_kv_pool_allocator.alloc(upto - start))
        req.kv.kv_committed_len = req.kv.kv_allocated_len = req.extend_end = upto
        s.last_batch = None

    def admit(self, req: Req) -> None:
        self.extend(req, len(req.origin_input_ids))
        req.output_ids.append(7)
        self.sched.running_batch.reqs.append(req)
        self.sched.last_batch = self.sched.running_batch

    def chunked(self, req: Req, chunks: int, *, wrong: Any = None) -> None:
        s = self.sched
        s.chunked_req = req
        for _ in range(chunks):
            self.extend(req, req.prefix_len + 8)
            self.boundary()
            checkpoint_kv_cache(req, s.tree_cache)
            if wrong is not None:
                wrong(req)
        s.chunked_req = None
        self.admit(req)

    def decode(self) -> None:
        s = self.sched
        self._room(len(s.running_batch.reqs))
        for req in s.running_batch.reqs:
            pos = req.kv.kv_allocated_len
            s.req_to_token_pool.write(
                (req.kv.req_pool_idx, slice(pos, pos + 1)), s.token_to_kv_pool_allocator.alloc(1)
            )
            req.kv.kv_committed_len = req.kv.kv_allocated_len = pos + 1
            req.output_ids.append(8)
        s.last_batch = s.running_batch

    def finish(self, req: Req, *, abort: bool = False) -> None:
        if req in self.sched.running_batch.reqs:
            self.sched.running_batch.reqs.remove(req)
        req.finished_reason = FINISH_ABORT("aborted") if abort else FINISH_LENGTH(len(req.output_ids))
        release_kv_cache(req, self.sched.tree_cache, checkpoint=not abort)

    def retract(self, req: Req) -> None:
        """retract_decode's release: nothing checkpointed, the request waits to run again."""
        self.sched.running_batch.reqs.remove(req)
        release_kv_cache(req, self.sched.tree_cache, checkpoint=False)
        req.reset_for_retract()

    def idle(self) -> tuple[str, dict[str, int | None]]:
        self.sched.last_batch = None
        snap = self.boundary()
        leak, messages = self.sched.on_idle()
        return ("; ".join(messages) if leak else ""), gaps(snap)

    def state(self) -> dict[str, Any]:
        s = self.sched
        alloc, pool, tree = s.token_to_kv_pool_allocator, s.req_to_token_pool, s.tree_cache
        ckpt = getattr(pool, "mamba_ckpt_pool", None)
        return {
            "kv_free": alloc.free_pages.tolist() + alloc.release_pages.tolist(),
            "mamba_free": pool.mamba_allocator.free_slots.tolist(),
            "ckpt_free": ckpt.allocator.free_slots.tolist() if ckpt is not None else None,
            "rows_free": list(pool.free_slots),
            "tree": (tree.full_evictable_size(), tree.full_protected_size(), tree.mamba_evictable_size()),
        }

    def actions(self) -> list[tuple[str, str, int, str]]:
        probe = probe_of(self.sched)
        snap = probe.latest if probe is not None else None
        return [(r.kind.value, r.pool.value, r.count, r.hook) for r in snap.repairs] if snap else []


# -- the wrong frees ---------------------------------------------------------------------------


def _released_row(rig: Rig0523, mark: dict[str, Any]) -> None:
    a = rig.arrive("a", list(range(40, 60)))
    rig.admit(a)
    rig.decode()
    row, n = int(a.kv.req_pool_idx), a.kv.kv_allocated_len
    rig.finish(a)
    rig.boundary()
    if mark["fault"]:  # a captured row, used after the release (the row is free again)
        s = rig.sched
        s.token_to_kv_pool_allocator.free(s.req_to_token_pool.req_to_token[row, :n])
    mark["after"] = rig.state()
    x = rig.arrive("x", list(range(70, 90)))
    rig.admit(x)
    rig.decode()
    rig.finish(x)


def _chunked_slot(rig: Rig0523, mark: dict[str, Any]) -> None:
    def wrong(req: Req) -> None:
        if mark["fault"]:
            rig.sched.req_to_token_pool.free_mamba_cache(req)
        mark.setdefault("after", rig.state())

    c = rig.arrive("c", list(range(200, 232)))
    rig.chunked(c, 3, wrong=wrong)
    rig.decode()
    rig.finish(c)


def _tree_value(rig: Rig0523, pool: str) -> Any:
    """The tree's one cached Mamba value, as SGLang flattens it."""
    return rig.sched.tree_cache.all_mamba_values_flatten()[:1]


def _tree_slot(rig: Rig0523, mark: dict[str, Any], *, checkpoint: bool) -> None:
    s = rig.sched
    a = rig.arrive("a", list(range(500, 520)))
    rig.admit(a)
    rig.decode()
    rig.finish(a)  # the tree keeps a's state (an active slot, or an int8 checkpoint slot)
    rig.boundary()  # a census: the tree proof's index
    if mark["fault"]:
        held = _tree_value(rig, "ckpt" if checkpoint else "mamba")
        owner = s.req_to_token_pool.mamba_ckpt_pool if checkpoint else s.req_to_token_pool.mamba_allocator
        owner.free(held.clone())  # a stale pointer freeing what the tree holds
    mark["after"] = rig.state()
    b = rig.arrive("b", [*range(500, 520), 9])  # hits a's cached state (copy on write)
    rig.admit(b)
    rig.decode()
    rig.finish(b)
    s.tree_cache.evict(EvictParams(num_tokens=64, mamba_num=4))


FAULTS = (
    ("full", "a finished request's KV freed again through its released row", _released_row, False, "full"),
    (
        "mamba",
        "free_mamba_cache of the live chunked request at a chunk boundary",
        _chunked_slot,
        False,
        "mamba",
    ),
    ("mamba", "a slot the tree holds, freed through a stale pointer", _tree_slot, False, "mamba"),
    (
        "mamba_ckpt",
        "an int8 checkpoint slot the tree holds, freed through a stale pointer",
        _tree_slot,
        True,
        "mamba_ckpt",
    ),
)


def _run(fault: Any, checkpoint: bool, *, wrong: bool, guard: bool) -> dict[str, Any]:
    rig = Rig0523(guard=guard, checkpoints=checkpoint)
    mark: dict[str, Any] = {"fault": wrong}
    if fault is _tree_slot:
        fault(rig, mark, checkpoint=checkpoint)
    else:
        fault(rig, mark)
    leak, gap = rig.idle()
    return {
        "after": mark.get("after"),
        "end": rig.state(),
        "leak": leak,
        "gaps": gap,
        "actions": rig.actions(),
    }


def wrong_free_checks() -> None:
    for pool, what, fault, checkpoint, expect in FAULTS:
        fixed = _run(fault, checkpoint, wrong=False, guard=False)
        off = _run(fault, checkpoint, wrong=True, guard=False)
        on = _run(fault, checkpoint, wrong=True, guard=True)
        report(
            f"0.5.23 {pool}: {what} -- guard off changes SGLang's state (the fixed path's differs)",
            off["after"] != fixed["after"] or off["end"] != fixed["end"] or bool(off["leak"]),
            {"leak": off["leak"][:300], "gaps": off["gaps"]},
        )
        report(
            f"0.5.23 {pool}: {what} -- guard on refuses it: SGLang's free lists, rows and tree equal the "
            "fixed path's right after it and at the end, its invariant checker passes, only refusals",
            on["after"] == fixed["after"]
            and on["end"] == fixed["end"]
            and not on["leak"]
            and all(v == 0 for v in on["gaps"].values())
            and {a[0] for a in on["actions"]} == {"refuse"}
            and {a[1] for a in on["actions"]} == {expect},
            {"actions": on["actions"], "leak": on["leak"][:300], "gaps": on["gaps"]},
        )


# -- the healthy long flow -----------------------------------------------------------------------


def _round(rig: Rig0523, i: int) -> str:
    s = rig.sched
    base = list(range(10 * (i % 3), 10 * (i % 3) + 12))  # three prompt families share prefixes
    a, b = rig.arrive(f"a{i}", [*base, 100 + i, 7]), rig.arrive(f"b{i}", [*base, 200 + i])
    rig.admit(a)
    rig.admit(b)
    rig.boundary()
    rig.decode()
    c = rig.arrive(f"c{i}", list(range(300 + i, 340 + i)))
    rig.chunked(c, 2)
    s.disagg_prefill_inflight_queue = [c]  # PD prefill: the KV is being sent
    rig.boundary()
    s.disagg_prefill_inflight_queue = []
    rig.decode()
    rig.finish(a, abort=i % 2 == 0)
    rig.retract(b)
    rig.admit(b)
    rig.decode()
    rig.boundary()
    for req in list(s.running_batch.reqs):
        rig.finish(req)
    if i % 2:
        s.tree_cache.evict(EvictParams(num_tokens=24, mamba_num=2))
    leak, _ = rig.idle()
    return leak


def healthy_checks(rounds: int = 12) -> None:
    for checkpoints in (False, True):
        rig = Rig0523(guard=True, checkpoints=checkpoints)
        leaks = [leak for i in range(rounds) if (leak := _round(rig, i))]
        _, gap = rig.idle()
        probe = probe_of(rig.sched)
        refuser = probe.refuser if probe is not None else None
        wrapped = refuser is not None and refuser.kv is not None and refuser.mamba is not None
        report(
            f"0.5.23 rank{' with int8 checkpoints' if checkpoints else ''}, guard on, {rounds} rounds of "
            "prefix sharing, chunked prefill, decode, abort, retraction, eviction: zero refusals, zero "
            "repairs, SGLang's invariant checker passes every time",
            wrapped
            and (not checkpoints or (refuser is not None and refuser.checkpoints is not None))
            and refuser is not None
            and refuser.refused == 0
            and rig.actions() == []
            and leaks == []
            and all(v == 0 for v in gap.values()),
            {"actions": rig.actions(), "leaks": leaks[:2], "gaps": gap, "wrapped": wrapped},
        )


def guard_0523_pool_checks(version: str) -> None:
    healthy_checks()
    wrong_free_checks()
