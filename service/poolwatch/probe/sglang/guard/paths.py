"""Where each SGLang release family frees slots, and which proofs hold there (data, read in the wheels).

Guard v2 wraps these free paths *on the instance* (never the class, never without guard mode) and
refuses what one of its proofs shows to be still owned (:mod:`poolwatch.probe.sglang.guard`).  One
:class:`GuardPaths` per family (keyed by ``Shape.family``):

===========  ===========================  ================  ===============  ======================
family       Mamba free(ids) wrapped      Mamba tree proof  checkpoint pool  KV entry points
===========  ===========================  ================  ===============  ======================
0.5.4        ``mamba_pool.free``          ``mamba_value``   --               ``free``, ``free_swa``
0.5.5.post3  ``mamba_pool.free``          ``mamba_value``   --               as 0.5.4
0.5.6        ``mamba_pool.free``          ``mamba_value``   --               as 0.5.4
0.5.9        ``mamba_pool.free``,         ``mamba_value``   --               as 0.5.4
0.5.10       + ``free_mamba_cache``                                          (the SWA pair's two
0.5.12                                                                       sides: only the pair)
0.5.13       ``mamba_allocator.free``,    ``mamba_value``   --               as 0.5.4
             + ``free_mamba_cache``
0.5.17       ``mamba_allocator.free``,    the tree's        ``mamba_ckpt_    + ``free_segment``
             + ``free_mamba_cache``       flattened values  pool.free``
0.5.19       as 0.5.17 (the slot in       as 0.5.17         as 0.5.17        + ``free_full``,
             ``req.kv``)                                                     ``free_segment``
0.5.20,      ``mamba_allocator.free``,    the tree's        ``mamba_ckpt_    + ``free_full``,
0.5.23       + ``free_mamba_cache``       flattened values  pool.free``      the ``*_segment`` frees
===========  ===========================  ================  ===============  ======================

Why, per column (each read in the released wheel):

* **Mamba**: up to 0.5.6 every Mamba free goes through ``mamba_pool.free`` (the row free's Mamba
  default, the fork release, eviction by node, ChunkCache); from 0.5.9 ``free_mamba_cache(req)``
  also frees the slot *and clears the pointer* (refused whole for the live chunked request); 0.5.13
  moved the free list to ``mamba_allocator`` (``MambaSlotAllocator``; its ``MambaRadixCache`` still
  evicts ``x.mamba_value`` by identity); 0.5.17 keeps the working slot on ``req.mamba_pool_idx``
  (``free_mamba_cache`` reads and clears it there), 0.5.19 moved it to ``req.kv.mamba_pool_idx``.
* **tree proof**: up to 0.5.13 eviction frees the node's own ``mamba_value`` tensor (by identity)
  before deleting the node; from 0.5.17 a hybrid Mamba (or SWA) model gets the unified tree
  (``UnifiedRadixCache``, its Mamba component's ``_free_mamba_value`` the one free of the tree's
  values), which tombstones the node's Mamba component
  (``value = None``) *before* the eviction result is freed, so a free of a value the tree still
  lists is never an eviction -- read through the tree's own ``all_mamba_values_flatten()``, which
  the Rust tree core (0.5.23's default) answers too.
* **checkpoint pool** (``--enable-int8-mamba-checkpoint``, from 0.5.17): ``MambaCheckpointPool.free``;
  its slots are held by tree nodes only (a commit that is not inserted is freed before any node
  holds it), so the tree proof is its proof.
* **tree prefix** (the ``protected`` column): the tree owns a held row's ``[0, cache_protected_len)``
  (``req.kv`` from 0.5.19 -- beside the row, ``req.kv.req_pool_idx``; on ``req`` up to 0.5.17;
  ``last_matched_prefix_len``, its name before 0.5.6), read at the free
  (:mod:`~poolwatch.probe.sglang.guard.owners`).  Never ``len(req.prefix_indices)``: the radix
  tree appends the request's own unaligned tail to it.  Up to 0.5.6 ``MambaRadixCache`` leaves the
  field at the match when a chunk inserts more (the chunk's columns are then not proven: a miss,
  never a wrong refusal).
* **KV**: every free of a request's KV through its ``req_to_token`` row (release, retract, the
  chunk and session paths) runs while the row is held (the row is given back last) -- but for
  ``ChunkCache.cache_finished_req`` up to 0.5.6 (``row_first``: the row goes back first, then the
  KV through it; a PD decode rank's default tree), wrapped as that release's window (with the
  speculative over-allocation ``release_kv_cache`` frees next through the same row:
  :mod:`~poolwatch.probe.sglang.guard.row_first`); the entry
  points are the allocator methods that take such a row view: ``free_segment`` from 0.5.17 (the
  unified tree's tail and unfinished frees, ``free_segments`` calling it per segment),
  ``free_full`` from 0.5.19 (``free_kv_row`` below the SWA eviction floor), the SWA and full
  ``*_segment`` variants from 0.5.20.  Up to 0.5.13 the SWA pair's sub-allocators are called by
  the pair alone (``direct_kv``), so a direct call of their ``free`` is off every healthy path;
  from 0.5.17 the unified tree's full and SWA components call ``full_attn_allocator.free`` (its
  evictions on an SWA model) and ``swa_attn_allocator.free`` (0.5.19's aborted external load)
  themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

from poolwatch.model.rank import Pool

__all__ = ["GUARD_PATHS", "GuardPaths", "MambaPaths"]


@dataclass(frozen=True, slots=True)
class MambaPaths:
    """The active Mamba pool's free paths of one family."""

    allocator: str  # the attribute of ``req_to_token_pool`` whose ``free(ids)`` is wrapped
    slot: tuple[str, ...]  # a request's working slot, as an attribute path
    tree: str  # "node": each node's ``mamba_value``; "flat": the tree's ``all_mamba_values_flatten()``
    request_free: bool  # ``req_to_token_pool.free_mamba_cache(req)`` clears the request's pointer


@dataclass(frozen=True, slots=True)
class GuardPaths:
    """Every free path guard v2 wraps on one release family."""

    family: str
    mamba: MambaPaths
    checkpoints: bool  # the int8 checkpoint pool's ``free`` (0.5.17 on)
    kv_entries: tuple[tuple[str, Pool], ...]  # allocator methods taking a row view, the pool refused
    direct_kv: bool  # the SWA pair's sub-allocators are called by the pair alone
    protected: tuple[str, ...] = ("cache_protected_len",)  # the tree's columns of a request's row
    row_first: bool = False  # ChunkCache.cache_finished_req frees the row before the KV through it
    takes: bool = False  # the KV columns the tree's insertions keep of a request's row (guard.takes)


_ROW = MambaPaths("mamba_pool", ("mamba_pool_idx",), tree="node", request_free=False)
_SPLIT = MambaPaths("mamba_pool", ("mamba_pool_idx",), tree="node", request_free=True)
_NODE_ALLOCATOR = MambaPaths("mamba_allocator", ("mamba_pool_idx",), tree="node", request_free=True)
_FLAT = MambaPaths("mamba_allocator", ("mamba_pool_idx",), tree="flat", request_free=True)
_ALLOCATOR = MambaPaths("mamba_allocator", ("kv", "mamba_pool_idx"), tree="flat", request_free=True)
_KV = (("free", Pool.FULL), ("free_swa", Pool.SWA))
_KV_0517 = (*_KV, ("free_segment", Pool.FULL))
_KV_0519 = (*_KV, ("free_full", Pool.FULL), ("free_segment", Pool.FULL))
_KV_0523 = (
    *_KV,
    ("free_full", Pool.FULL),
    ("free_segment", Pool.FULL),
    ("free_full_segment", Pool.FULL),
    ("free_swa_segment", Pool.SWA),
)


def _legacy(
    family: str, mamba: MambaPaths, protected: str = "cache_protected_len", row_first: bool = False
) -> GuardPaths:
    """A family up to 0.5.13 (the request's fields on ``req``)."""
    return GuardPaths(family, mamba, False, _KV, direct_kv=True, protected=(protected,), row_first=row_first)


_KV_LENS = ("kv", "cache_protected_len")
GUARD_PATHS: dict[str, GuardPaths] = {
    "0.5.4": _legacy("0.5.4", _ROW, "last_matched_prefix_len", row_first=True),
    "0.5.5.post3": _legacy("0.5.5.post3", _ROW, "last_matched_prefix_len", row_first=True),
    "0.5.6": _legacy("0.5.6", _ROW, row_first=True),
    "0.5.9": _legacy("0.5.9", _SPLIT),
    "0.5.10": _legacy("0.5.10", _SPLIT),
    "0.5.12": _legacy("0.5.12", _SPLIT),
    "0.5.13": _legacy("0.5.13", _NODE_ALLOCATOR),
    "0.5.17": GuardPaths("0.5.17", _FLAT, True, _KV_0517, direct_kv=False, takes=True),
    "0.5.19": GuardPaths(
        "0.5.19", _ALLOCATOR, True, _KV_0519, direct_kv=False, protected=_KV_LENS, takes=True
    ),
    "0.5.20": GuardPaths("0.5.20", _ALLOCATOR, True, _KV_0523, direct_kv=False, protected=_KV_LENS),
    "0.5.23": GuardPaths("0.5.23", _ALLOCATOR, True, _KV_0523, direct_kv=False, protected=_KV_LENS),
}
