"""Guard v2 on real SGLang 0.5.23 classes: a chunked prefill whose chunk step frees the chunked
request's Mamba slot, through SGLang's own ``HybridReqToTokenPool`` (``alloc``, ``free_mamba_cache``),
``MambaSlotAllocator``, ``MambaPool`` state tensors and ``SchedulerInvariantChecker``.

Three long prompts are prefilled in four chunks each; after every chunk boundary a short request is
admitted (SGLang's ``alloc`` gives it a Mamba slot, with ``mamba_needs_clear``) and "forwarded".
Every forward writes each request's conv and temporal state from its previous value and the
chunk's tokens (``state = state / 2 + f(tokens)``; a slot to be cleared starts from zero), so a
request that lost its slot carries a different state from then on.  The wrong free comes in the two
shapes this release's API allows, once per chunk boundary:

* ``free_mamba_cache(chunked_req)`` (the #12432 free on 0.5.23's API): the slot goes back and the
  request's pointer is cleared, so the next chunk's ``alloc`` gives it a fresh, cleared slot.  The
  books still balance -- SGLang's invariant checker cannot see it -- but the state is lost.
* ``mamba_allocator.free(slot)`` through a stale pointer: the request keeps the slot while it is
  on the free list, and its release frees it a second time (the checker raises at idle).

With guard on, both are refused before the allocator runs: the long prompts' states are
bit-identical to the flow without the fault after every chunk, the checker passes at every idle
moment, and the only guard actions are refusals (no repair needed); the healthy flow refuses nothing.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from check_release import CONFIG, gaps, report
from sglang.srt.managers.schedule_batch import Req
from sglang.srt.sampling.sampling_params import SamplingParams

from poolwatch.probe.lifecycle import attach, detach, probe_of
from poolwatch.probe.sglang.engine import SGLANG

__all__ = ["guard_checks_0523"]

CHUNK, CHUNKS = 8, 4


def _states(driver: Any) -> list[Any]:
    cache = driver.sched.req_to_token_pool.mamba_pool.mamba_cache
    conv = cache.conv if isinstance(cache.conv, list | tuple) else [cache.conv]
    return [*conv, cache.temporal]


def _forward(driver: Any, req: Any, tokens: list[int]) -> None:
    slot = int(req.kv.mamba_pool_idx)
    step = float(sum(tokens) % 997) + 0.25 * len(tokens)
    for t in _states(driver):
        if req.kv.mamba_needs_clear:
            t[:, slot] = 0
        ramp = torch.arange(t[:, slot].numel(), dtype=torch.float32).reshape(t[:, slot].shape)
        t[:, slot] = (t[:, slot] / 2 + (step + ramp / 7).to(t.dtype)).to(t.dtype)
    req.kv.mamba_needs_clear = False


def _extend(driver: Any, req: Any, tokens: list[int]) -> None:
    """SGLang's ``alloc`` (the row kept, a Mamba slot if the request holds none) and the chunk's KV."""
    s = driver.sched
    assert s.req_to_token_pool.alloc([req]) is not None
    start = req.kv.kv_allocated_len
    slots = s.token_to_kv_pool_allocator.alloc(len(tokens))
    s.req_to_token_pool.write((req.kv.req_pool_idx, slice(start, start + len(tokens))), slots)
    req.kv.kv_committed_len = req.kv.kv_allocated_len = start + len(tokens)
    _forward(driver, req, tokens)


def _state_of(driver: Any, req: Any) -> list[Any]:
    slot = int(req.kv.mamba_pool_idx)
    return [t[:, slot].clone() for t in _states(driver)]


def _wrong_free(driver: Any, req: Any, fault: str) -> None:
    pool = driver.sched.req_to_token_pool
    if fault == "free_mamba_cache":
        pool.free_mamba_cache(req)
    elif fault == "mamba_allocator.free":
        pool.mamba_allocator.free(req.kv.mamba_pool_idx.unsqueeze(0))


def run_flow(driver: Any, *, guard: bool, fault: str) -> dict[str, Any]:
    s = driver.new()
    detach(s)
    attach(SGLANG, s, replace(CONFIG, guard=guard), serve=False)
    out: dict[str, Any] = {"idle_passed": 0, "raised": "", "states": [], "gaps": {}}
    for i in range(3):
        prompt = list(range(300 + 40 * i, 300 + 40 * i + CHUNK * CHUNKS))
        c = Req(f"long{i}", "", prompt, SamplingParams(max_new_tokens=4))
        s.chunked_req = c
        shorts: list[Any] = []
        for k in range(CHUNKS):
            _extend(driver, c, prompt[CHUNK * k : CHUNK * (k + 1)])
            out["states"].append(_state_of(driver, c))
            if k == CHUNKS - 1:
                break
            driver.boundary()
            _wrong_free(driver, c, fault)
            x = Req(f"short{i}.{k}", "", [900 + 10 * i + k, 7, 7, 7], SamplingParams(max_new_tokens=4))
            _extend(driver, x, list(x.origin_input_ids))
            x.output_ids.append(7)
            s.running_batch.reqs.append(x)
            shorts.append(x)
        s.chunked_req = None
        c.output_ids.append(7)
        s.running_batch.reqs.append(c)
        s.last_batch = s.running_batch
        driver.boundary()
        for req in [c, *shorts]:
            driver.release(req)
        s.last_batch = None
        out["gaps"] = gaps(driver.boundary())
        leak, messages = s.on_idle()
        if leak:
            out["raised"] = str(messages)
            break
        out["idle_passed"] += 1
    probe = probe_of(s)
    snap = probe.latest if probe is not None else None
    out["repairs"] = [(r.kind.value, r.pool.value, r.count, r.hook) for r in snap.repairs] if snap else []
    out["tripwires"] = [str(t) for t in snap.tripwires] if snap else []
    return out


def _same(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(
        len(x) == len(y) and all(torch.equal(u, v) for u, v in zip(x, y, strict=True))
        for x, y in zip(a, b, strict=True)
    )


def guard_checks_0523(driver: Any) -> None:
    ref = run_flow(driver, guard=False, fault="")
    n = len(ref["states"])
    report(
        "0.5.23 guard v2, reference (no wrong free, guard off): the invariant checker passes at every idle",
        ref["idle_passed"] == 3 and n == 12,
        {k: ref[k] for k in ("idle_passed", "raised")} | {"chunks": n},
    )
    healthy = run_flow(driver, guard=True, fault="")
    report(
        "0.5.23 guard v2 on the healthy flow: zero refusals, zero repairs, states as the reference",
        healthy["repairs"] == [] and healthy["idle_passed"] == 3 and _same(healthy["states"], ref["states"]),
        {k: healthy[k] for k in ("repairs", "idle_passed")},
    )
    for fault in ("free_mamba_cache", "mamba_allocator.free"):
        off = run_flow(driver, guard=False, fault=fault)
        on = run_flow(driver, guard=True, fault=fault)
        silent = fault == "free_mamba_cache"
        seen = "SGLang's checker passes (the books balance, the state is lost)" if silent else "SGLang raises"
        report(
            f"0.5.23 {fault} of the chunked request's slot, guard off: the states differ from the reference; "
            + seen,
            not _same(off["states"][:n], ref["states"])
            and (off["idle_passed"] == 3 if silent else bool(off["raised"])),
            {k: off[k] for k in ("idle_passed", "raised", "repairs")},
        )
        report(
            f"0.5.23 {fault}, guard on: the long prompts' Mamba conv and temporal states are bit-identical "
            "to the reference after every chunk, SGLang's checker passes at every idle moment",
            _same(on["states"], ref["states"]) and on["idle_passed"] == 3 and not on["raised"],
            {k: on[k] for k in ("idle_passed", "raised")} | {"compared": len(on["states"])},
        )
        report(
            f"0.5.23 {fault}, guard on: no repair needed -- every action is a refusal in {fault}, one per "
            "chunk boundary; conservation exact afterwards",
            on["repairs"] == [("refuse", "mamba", 9, fault)]
            and all(v == 0 for v in on["gaps"].values())
            and on["tripwires"] == [],
            {k: on[k] for k in ("repairs", "gaps", "tripwires")},
        )
