"""Without guard: the line of SGLang that frees the chunked request's Mamba slot, caught next time.

The #12994 chunk tripwire (:mod:`~poolwatch.probe.sglang.tripwires`) looks right after
``process_prefill_chunk``: it proves the chunked request's Mamba slot is on the free list, but the
free has returned by then, so its call site names only where the hook was called.  The seed free
repeats at every chunk boundary of every chunked request, so after a first finding the probe arms
a one-shot :class:`~poolwatch.probe.core.witness.FreeWitness` on the family's Mamba free paths (the
ones guard v2 wraps, :data:`~poolwatch.probe.sglang.guard.paths.GUARD_PATHS`): the next free of a slot
that the live chunked request still works in -- guard's *live* proof, read at the call -- is the
same wrong free, and its engine call site is captured (``next_free``) and given to the finding.

Only without guard (with it, the refusal itself records the free's call site) and only on the
families whose free paths were read.  Cost while armed, per free of those paths: one attribute
chain, ``finished()``, and the freed ids read to the host (``tolist``); nothing once it fired.
"""

from __future__ import annotations

from typing import Any

from poolwatch.probe.core.witness import FreeWitness
from poolwatch.probe.sglang.guard.paths import GUARD_PATHS, MambaPaths

__all__ = ["arm_mamba_witness"]


def arm_mamba_witness(witness: FreeWitness, sched: Any, family: str) -> bool:
    """Arm ``witness`` on the Mamba free paths of ``family``; False when none could be armed."""
    family_paths = GUARD_PATHS.get(family)
    pool = getattr(sched, "req_to_token_pool", None)
    if family_paths is None or pool is None or witness.armed or witness.fired:
        return False
    paths = family_paths.mamba
    armed = witness.arm(
        getattr(pool, paths.allocator, None), "free", lambda ids, *_, **__: _frees_live(sched, paths, ids)
    )
    if paths.request_free:
        armed |= witness.arm(pool, "free_mamba_cache", lambda req, *_, **__: _is_live(sched, paths, req))
    return armed


def _live(sched: Any, paths: MambaPaths) -> tuple[Any, int | None]:
    """The live chunked request and the one slot it works in (``None``: no such request or slot)."""
    req = getattr(sched, "chunked_req", None)
    if req is None or req.finished():
        return None, None
    tensor: Any = req
    for name in paths.slot:
        tensor = getattr(tensor, name, None)
    if tensor is None:
        return req, None
    flat = tensor.reshape(-1)
    return req, int(flat[0]) if int(flat.numel()) == 1 else None


def _frees_live(sched: Any, paths: MambaPaths, free_index: Any) -> bool:
    """The allocator's ``free(ids)`` frees the live chunked request's working slot."""
    _, slot = _live(sched, paths)
    if slot is None:
        return False
    ids = free_index.reshape(-1).tolist() if hasattr(free_index, "reshape") else free_index
    return slot in ids if isinstance(ids, list | tuple) else ids == slot


def _is_live(sched: Any, paths: MambaPaths, req: Any) -> bool:
    """``free_mamba_cache(req)`` frees the live chunked request's slot."""
    live, slot = _live(sched, paths)
    return live is not None and req is live and slot is not None
