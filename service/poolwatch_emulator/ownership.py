"""Giving a request's row and Mamba slot back, in the API shape of the release.

0.5.4 frees a row with ``HybridReqToTokenPool.free(idx, free_mamba_cache=...)`` (the Mamba slot
is found through ``req_index_to_mamba_index_mapping``) and leaves ``req.req_pool_idx`` and
``req.mamba_pool_idx`` stale; 0.5.9+ calls ``free(req)`` and ``free_mamba_cache(req)``, which
clear them.  ``req.emu_row_held`` is the emulator's own note of whether the (possibly stale)
``req_pool_idx`` is really held, so a stale row is never freed twice by the emulator itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from poolwatch_emulator.req_pool import HybridReqToTokenPool, ReqToTokenPool

if TYPE_CHECKING:
    from poolwatch_emulator.req import Req

__all__ = ["free_req_mamba", "free_row", "hybrid"]


def hybrid(pool: ReqToTokenPool) -> HybridReqToTokenPool | None:
    return pool if isinstance(pool, HybridReqToTokenPool) else None


def free_row(pool: ReqToTokenPool, req: Req, *, free_mamba: bool) -> None:
    """Free ``req``'s row and, when ``free_mamba``, its Mamba slot."""
    hp = hybrid(pool)
    if not req.emu_row_held or req.req_pool_idx is None:
        if free_mamba and req.mamba_pool_idx is not None:
            free_req_mamba(pool, req)
        return
    req.emu_row_held = False
    if hp is None:
        pool.free(req if pool.free_by_req else req.req_pool_idx)
    elif hp.split_mamba_free:
        hp.free(req)
        if free_mamba and req.mamba_pool_idx is not None:
            hp.free_mamba_cache(req)
    else:
        hp.free(req.req_pool_idx, free_mamba_cache=free_mamba)


def free_req_mamba(pool: ReqToTokenPool, req: Req) -> None:
    """Free a Mamba slot held by a request without a row (a COW slot while waiting)."""
    hp = hybrid(pool)
    if hp is None or req.mamba_pool_idx is None:
        return
    if hp.split_mamba_free:
        hp.free_mamba_cache(req)
    else:
        hp.mamba_pool.free(req.mamba_pool_idx)
        req.mamba_pool_idx = None
