"""Guard at the chunk boundary, on a release's own classes: the Mamba state a long prompt carries
from chunk to chunk survives a wrong free of its slot.

On a PD prefill rank three long prompts are prefilled in four chunks each through the driver
(:mod:`rigs.sglang.driver`); after every chunk boundary a short request is admitted (it takes a
Mamba slot from the free list) and the KV is handed to a decode rank at the end; after each long
prompt the rank goes idle and SGLang's own strict check runs.  Every "forward" writes each
request's Mamba conv and temporal state from its previous value and the chunk's tokens
(``state = state / 2 + f(tokens)``; a slot SGLang marks to be cleared starts from zero), so a
request that lost its slot carries a different state from then on.  The chunk step is:

* up to 0.5.12, SGLang's own ``process_prefill_chunk``: on 0.5.4.post1 it frees the chunked
  request's row with the Mamba default (#12432, live); the reference is the step as PR #12994
  fixed it;
* on 0.5.23, ``checkpoint_kv_cache`` followed by a wrong free in each of the two shapes 0.5.23's API
  allows: ``free_mamba_cache(chunked_req)`` (the #12432 free on 0.5.23's API: the books balance,
  the state is lost) and ``mamba_allocator.free`` through a stale pointer (SGLang's checker raises).

Guard off, the states differ from the reference (and SGLang's check raises, where it can see it);
guard on, v2 refuses the wrong free before the pool runs: the states are bit-identical to the
reference after every chunk, the check passes at every idle moment, no Mamba slot is ever shared,
every pool balances exactly afterwards, and the only guard actions are the refusals (none on a
healthy flow or a fixed release).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from rigs.checks import report
from rigs.sglang.driver import Driver, gaps

__all__ = ["guard_chunk_checks"]

CHUNK, CHUNKS, PROMPTS = 8, 4, 3
Step = Callable[[Driver, Any], None]  # the chunk step, given the chunked request


def _states(driver: Driver) -> list[Any]:
    """The Mamba pool's conv and temporal tensors (0.5.9+ keeps conv as a per-kind list)."""
    cache = driver.sched.req_to_token_pool.mamba_pool.mamba_cache
    conv = cache.conv if isinstance(cache.conv, list | tuple) else [cache.conv]
    return [*conv, cache.temporal]


def forward(driver: Driver, req: Any) -> None:
    """The model's step on ``req``: its state from its previous state and this pass's tokens."""
    held = driver.record(req)
    slot = int(held.mamba_pool_idx)
    if driver.release.tree_lock:
        tokens = list(req.origin_input_ids[req.prefix_len : req.extend_end])
    elif driver.release.unified_tree:  # 0.5.17 - 0.5.21: from the prefix to what the round allocated
        tokens = list(req.origin_input_ids[len(req.prefix_indices) : driver.allocated(req)])
    elif driver.release.fill_len:  # 0.5.13: the round's fill is fill_len over the untruncated ids
        tokens = list(req.full_untruncated_fill_ids[len(req.prefix_indices) : req.fill_len])
    else:
        tokens = list(req.fill_ids[len(req.prefix_indices) :])
    step = float(sum(tokens) % 997) + 0.25 * len(tokens)
    clear = bool(getattr(held, "mamba_needs_clear", False))
    for t in _states(driver):
        if clear:
            t[:, slot] = 0
        ramp = torch.arange(t[:, slot].numel(), dtype=torch.float32).reshape(t[:, slot].shape)
        t[:, slot] = (t[:, slot] / 2 + (step + ramp / 7).to(t.dtype)).to(t.dtype)
    if clear:
        held.mamba_needs_clear = False


def _state_of(driver: Driver, req: Any) -> list[Any]:
    slot = int(driver.record(req).mamba_pool_idx)
    return [t[:, slot].clone() for t in _states(driver)]


def _shared(driver: Driver, live: list[Any]) -> list[tuple[int, list[str]]]:
    held: dict[int, list[str]] = {}
    for req in live:
        idx = driver.record(req).mamba_pool_idx
        if not req.finished() and idx is not None:
            for slot in idx.reshape(-1).tolist():
                held.setdefault(int(slot), []).append(req.rid)
    return [(s, rids) for s, rids in sorted(held.items()) if len(rids) > 1]


def run_flow(driver: Driver, *, guard: bool, step: Step) -> dict[str, Any]:
    """The flow on a fresh PD prefill rank; what happened."""
    s = driver.new("prefill", guard=guard)
    out: dict[str, Any] = {"idle_passed": 0, "raised": "", "shared": [], "states": [], "gaps": {}}
    for i in range(PROMPTS):
        c = driver.arrive(f"long{i}", list(range(300 + 40 * i, 300 + 40 * i + CHUNK * CHUNKS)))
        shorts: list[Any] = []
        for k in range(CHUNKS):
            driver.prefill([c], chunk=CHUNK)
            forward(driver, c)
            out["states"].append(_state_of(driver, c))
            if k == CHUNKS - 1:
                break
            driver.boundary()
            step(driver, c)
            x = driver.arrive(f"short{i}.{k}", [900 + 10 * i + k, 7, 7, 7])
            batch = driver.prefill([x])
            forward(driver, x)
            driver.prefill_done(batch)
            shorts.append(x)
            out["shared"] += _shared(driver, [c, *shorts])
        driver.send(c)
        for x in shorts:
            driver.finish(x)
        s.last_batch = None
        out["gaps"] = gaps(driver.boundary())
        try:
            driver.strict_check()
        except ValueError as exc:
            out["raised"] = str(exc)
            break
        out["idle_passed"] += 1
    snap = driver.probe.latest
    out["repairs"] = driver.actions()
    out["tripwires"] = [str(t) for t in snap.tripwires] if snap else []
    return out


def _same(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(
        len(x) == len(y) and all(torch.equal(u, v) for u, v in zip(x, y, strict=True))
        for x, y in zip(a, b, strict=True)
    )


# -- the chunk steps ---------------------------------------------------------------------------


def own_step(driver: Driver, _req: Any) -> None:
    """SGLang's own ``process_prefill_chunk`` (up to 0.5.12)."""
    driver.chunk_step()


def fixed_step(driver: Driver, _req: Any) -> None:
    """The chunk step as PR #12994 fixed it: the row is freed, the Mamba slot kept."""
    pool = driver.sched.req_to_token_pool
    pool.free = functools.partial(type(pool).free, pool, free_mamba_cache=False)
    try:
        driver.chunk_step()
    finally:
        del pool.free


def checkpoint_then(fault: str) -> Step:
    """The unified tree's chunk boundary (0.5.17 on), then ``fault`` on the chunked request's slot
    ("" for none)."""

    def step(driver: Driver, req: Any) -> None:
        driver.chunk_boundary()
        pool = driver.sched.req_to_token_pool
        if fault == "free_mamba_cache":
            pool.free_mamba_cache(req)
        elif fault == "mamba_allocator.free":
            pool.mamba_allocator.free(driver.record(req).mamba_pool_idx.unsqueeze(0))

    return step


# -- the checks --------------------------------------------------------------------------------


def _guard_on(label: str, on: dict[str, Any], ref: dict[str, Any], refusals: list[Any]) -> None:
    report(
        f"{label}, guard on: the long prompts' Mamba conv and temporal states are bit-identical to the "
        "reference after every chunk, SGLang's check passes at every idle moment, no slot is ever shared",
        _same(on["states"], ref["states"]) and on["idle_passed"] == PROMPTS and not on["shared"],
        {k: on[k] for k in ("idle_passed", "raised", "shared")} | {"compared": len(on["states"])},
    )
    report(
        f"{label}, guard on: conservation is exact afterwards and the only guard actions are "
        f"{refusals or 'none'}",
        on["repairs"] == refusals and all(v == 0 for v in on["gaps"].values()) and on["tripwires"] == [],
        {k: on[k] for k in ("repairs", "gaps", "tripwires")},
    )


def _guard_off(label: str, off: dict[str, Any], ref: dict[str, Any], *, raises: str) -> None:
    """``raises``: what SGLang's check says at the first idle moment ("": it passes every time)."""
    seen = "SGLang's own check raises at once, as without poolwatch" if raises else "SGLang's check passes"
    said = raises in off["raised"] and off["idle_passed"] == 0 if raises else off["idle_passed"] == PROMPTS
    report(
        f"{label}, guard off: the states differ from the reference; {seen}",
        not _same(off["states"][: len(ref["states"])], ref["states"]) and said,
        {k: off[k] for k in ("idle_passed", "raised", "repairs")},
    )


def guard_chunk_checks(driver: Driver) -> None:
    """The reference, guard off and guard on runs of the flow on ``driver``'s release."""
    unified = driver.release.unified_tree
    ref = run_flow(driver, guard=False, step=checkpoint_then("") if unified else fixed_step)
    report(
        f"{driver.release.version} chunk boundaries, reference: SGLang's check passes at every idle moment",
        ref["idle_passed"] == PROMPTS and len(ref["states"]) == PROMPTS * CHUNKS and not ref["shared"],
        {k: ref[k] for k in ("idle_passed", "raised", "shared")} | {"chunks": len(ref["states"])},
    )
    if not unified:  # the release's own chunk step: #12432 where it is live
        label = f"{driver.release.version} process_prefill_chunk"
        buggy = driver.release.seed_live
        if buggy:
            off = run_flow(driver, guard=False, step=own_step)
            _guard_off(label, off, ref, raises="mamba_available_size")
        refused = [("refuse", "mamba", PROMPTS * (CHUNKS - 1), "mamba_pool.free")] if buggy else []
        _guard_on(label, run_flow(driver, guard=True, step=own_step), ref, refused)
        return
    version = driver.release.version
    _guard_on(
        f"{version} healthy chunk boundaries", run_flow(driver, guard=True, step=checkpoint_then("")), ref, []
    )
    for fault in ("free_mamba_cache", "mamba_allocator.free"):
        label = f"{version} {fault} of the chunked request's slot"
        off = run_flow(driver, guard=False, step=checkpoint_then(fault))
        _guard_off(label, off, ref, raises="leak" if fault == "mamba_allocator.free" else "")
        on = run_flow(driver, guard=True, step=checkpoint_then(fault))
        _guard_on(label, on, ref, [("refuse", "mamba", PROMPTS * (CHUNKS - 1), fault)])
