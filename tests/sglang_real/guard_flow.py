"""Guard mode against a real SGLang release: its own PD prefill chunk flow, its own idle check.

Three long prompts are prefilled in chunks through SGLang's real ``process_prefill_chunk`` (on
0.5.4.post1 it frees the chunked request's row with ``free_mamba_cache=True``: the seed bug), a
short request is admitted after every chunk boundary (it takes a Mamba slot from the free list),
and after each long prompt is transferred and released the rank goes idle and SGLang's own strict
check runs.  Every "forward" writes each request's Mamba conv and temporal state from its previous
value and the chunk's tokens (``state = state / 2 + f(tokens)``), so a zeroed or shared slot
changes what a request carries from chunk to chunk.  The same flow runs three ways:

* reference: the chunk step as the fix does it (``free_mamba_cache=False`` on 0.5.4), guard off;
* guard off: unchanged behaviour -- SGLang's idle check raises after the first long prompt;
* guard on (v2 refuses the wrong free before ``MambaPool.free`` runs): the long prompts' Mamba
  states are bit-identical to the reference after every chunk, the check passes at every idle
  moment, no Mamba slot is ever shared, every pool balances exactly afterwards, and the only
  guard actions are refusals in ``mamba_pool.free`` (no repair was needed);
* on a fixed release the same flow refuses nothing and repairs nothing.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from check_release import CONFIG, gaps, report

from poolwatch.probe.lifecycle import attach, detach, probe_of
from poolwatch.probe.sglang.engine import SGLANG

__all__ = ["guard_checks"]


def _mamba_ids(req: Any) -> list[int]:
    idx = getattr(req, "mamba_pool_idx", None)
    return [] if idx is None else [int(i) for i in idx.reshape(-1).tolist()]


def _shared(driver: Any, live: list[Any]) -> list[tuple[int, list[str]]]:
    held: dict[int, list[str]] = {}
    for req in live:
        if not req.finished():
            for slot in _mamba_ids(req):
                held.setdefault(slot, []).append(req.rid)
    return [(s, rids) for s, rids in sorted(held.items()) if len(rids) > 1]


def _state_tensors(pool: Any) -> list[Any]:
    """The Mamba pool's conv and temporal tensors (0.5.9+ keeps conv as a per-kind list)."""
    out: list[Any] = []
    for name in ("conv", "temporal"):
        value = getattr(pool.mamba_cache, name)
        out += list(value) if isinstance(value, list | tuple) else [value]
    return out


def forward(driver: Any, batch: Any) -> None:
    """The model's step on each request of ``batch``: its state from its previous state and tokens."""
    import torch

    pool = driver.sched.req_to_token_pool.mamba_pool
    for req in batch.reqs:
        slot = int(req.mamba_pool_idx)
        tokens = req.fill_ids[len(req.prefix_indices) :]
        step = float(sum(tokens) % 997) + 0.25 * len(tokens)
        for t in _state_tensors(pool):
            ramp = torch.arange(t[:, slot].numel(), dtype=torch.float32).reshape(t[:, slot].shape)
            t[:, slot] = (t[:, slot] / 2 + (step + ramp / 7).to(t.dtype)).to(t.dtype)


def _state_of(driver: Any, req: Any) -> list[Any]:
    pool = driver.sched.req_to_token_pool.mamba_pool
    slot = int(req.mamba_pool_idx)
    return [t[:, slot].clone() for t in _state_tensors(pool)]


def run_flow(driver: Any, *, guard: bool, strict_check: Any, chunk_step: Any) -> dict[str, Any]:
    """The flow on a fresh prefill holder; returns what happened."""
    s = driver.new("prefill")
    detach(s)
    attach(SGLANG, s, replace(CONFIG, guard=guard), serve=False)
    out: dict[str, Any] = {"idle_passed": 0, "raised": "", "shared": [], "shorts": 0, "states": []}
    for i in range(3):
        c = driver.arrive(f"long{i}", list(range(300 + 40 * i, 330 + 40 * i)))
        shorts: list[Any] = []
        for k in range(3):
            forward(driver, driver.prefill([c], chunk=8))
            out["states"].append(_state_of(driver, c))
            driver.boundary()
            chunk_step()
            x = driver.arrive(f"short{i}.{k}", [900 + 10 * i + k, 7, 7, 7])
            batch = driver.prefill([x])
            forward(driver, batch)
            driver.prefill_done(batch)
            shorts.append(x)
            out["shared"] += _shared(driver, [c, *shorts])
        forward(driver, driver.prefill([c], chunk=64))
        out["states"].append(_state_of(driver, c))
        s.tree_cache.cache_unfinished_req(c)
        s.disagg_prefill_inflight_queue.append(c)
        driver.boundary()
        s.disagg_prefill_inflight_queue.remove(c)
        driver.finish_transferred(c)
        for x in shorts:
            driver.finish(x)
        out["shorts"] += len(shorts)
        s.last_batch = None
        snap = driver.boundary()
        out["gaps"] = gaps(snap)
        try:
            strict_check()
        except ValueError as exc:
            out["raised"] = str(exc)
            break
        out["idle_passed"] += 1
    probe = probe_of(s)
    snap = probe.latest if probe is not None else None
    out["repairs"] = [(r.kind.value, r.pool.value, r.count, r.hook) for r in snap.repairs] if snap else []
    out["tripwires"] = [str(t) for t in snap.tripwires] if snap else []
    return out


def _same_states(a: list[Any], b: list[Any]) -> bool:
    import torch

    return len(a) == len(b) and all(
        len(x) == len(y) and all(torch.equal(u, v) for u, v in zip(x, y, strict=True))
        for x, y in zip(a, b, strict=True)
    )


def guard_checks(
    driver: Any, *, buggy: bool, strict_check: Any, chunk_step: Any, fixed_step: Any = None
) -> None:
    """Report the reference, guard-off and guard-on runs of the flow (``buggy``: the release has
    #12432; ``fixed_step``: the chunk step as its fix does it, default ``chunk_step``)."""
    ref = run_flow(driver, guard=False, strict_check=strict_check, chunk_step=fixed_step or chunk_step)
    off = run_flow(driver, guard=False, strict_check=strict_check, chunk_step=chunk_step)
    on = run_flow(driver, guard=True, strict_check=strict_check, chunk_step=chunk_step)
    report(
        "reference (the fix's chunk step, guard off): SGLang's idle check passes at every idle moment",
        ref["idle_passed"] == 3 and not ref["raised"] and ref["shared"] == [],
        {k: ref[k] for k in ("idle_passed", "raised", "shared")},
    )
    n = len(ref["states"])
    report(
        "guard on: the long prompts' Mamba conv and temporal states are bit-identical to the reference "
        "after every chunk",
        n == 12 and _same_states(on["states"], ref["states"]),
        {"chunks": n, "compared": len(on["states"])},
    )
    if buggy:
        report(
            "guard off: the states differ from the reference (the check above can fail)",
            not _same_states(off["states"][:n], ref["states"]),
            {"chunks_off": len(off["states"])},
        )
    if buggy:
        report(
            "guard off: SGLang's own idle check raises, as without poolwatch",
            bool(off["raised"]) and "mamba_available_size" in off["raised"] and off["idle_passed"] == 0,
            {k: off[k] for k in ("raised", "idle_passed", "repairs")},
        )
    report(
        "guard on: SGLang's idle check passes at every idle moment, no Mamba slot is ever shared",
        on["idle_passed"] == 3 and not on["raised"] and on["shared"] == [],
        {k: on[k] for k in ("idle_passed", "raised", "shared", "repairs")},
    )
    report(
        "guard on: conservation is exact afterwards and nothing is left unrepaired",
        all(v == 0 for v in on["gaps"].values()) and on["tripwires"] == [],
        {"gaps": on["gaps"], "tripwires": on["tripwires"]},
    )
    if buggy:
        report(
            "guard on: no repair was needed -- every action is a Mamba refusal inside mamba_pool.free, "
            "one per chunk boundary",
            on["repairs"] == [("refuse", "mamba", 9, "mamba_pool.free")],
            on["repairs"],
        )
    else:
        report("guard on a fixed release: zero refusals, zero repairs", on["repairs"] == [], on["repairs"])
