"""Guard v2 (guard mode only): refuse a Mamba free whose slot is provably still owned.

Guard v1 (:mod:`poolwatch.probe.sglang.repair`) takes a wrongly freed slot back off the free list at
the next hook, after the pool's ``free`` already ran -- and on 0.5.4-0.5.6 ``MambaPool.free`` zeroes
the slot's conv and temporal state, so the request it belonged to goes on from a zeroed state (on
0.5.23 the slot is handed to the next request, which writes over it).  Guard v2 wraps the family's
free paths *on the instance* (never the class, never without guard mode) and, before the original
runs, drops what one of two proofs (the census's own) shows to be owned:

* **live**: the id is the working slot of ``chunked_req``, which is not finished -- the #12432
  free;
* **tree**: the id is a tree node's ``mamba_value`` in the index taken at the last Mamba census,
  the node still holds that very tensor, and the call is not freeing that tensor itself (an
  eviction frees ``node.mamba_value`` by identity, and is let through and forgotten).

Two paths, as the family has them (:data:`FREE_PATHS`):

* ``free(ids)`` of the slot allocator: the owned ids are dropped, the others freed in one call;
* ``free_mamba_cache(req)`` (0.5.9 on): the call frees the request's slot *and* clears its pointer,
  so refusing the id inside would leave the request pointing nowhere (its next allocation a fresh
  slot, the old one leaked).  A call for the live chunked request is refused whole: nothing freed,
  nothing cleared (its ping-pong track slots stay with it too).

Each refusal is a :class:`~poolwatch.model.Repair` of kind ``refuse`` (counted, logged, published,
alerted on).  Ping-pong track slots are never refused on their own (SGLang rotates them).

===========  ===========================  ===========  ==========================================
family       wrapped                      proofs       why (read in the released wheel)
===========  ===========================  ===========  ==========================================
0.5.4        ``mamba_pool.free``          live, tree   every Mamba free goes through it: the row
0.5.5.post3                                            free's Mamba default (#12432), the fork
0.5.6                                                  release, eviction by node, abort release
0.5.9        ``mamba_pool.free``,         live, tree   as 0.5.4, plus ``free_mamba_cache`` (it
0.5.10       ``free_mamba_cache``                      clears ``req.mamba_pool_idx``); HiMamba and
0.5.12                                                 0.5.12's unified tree evict by node too
0.5.23       ``mamba_allocator.free``,    live         ids 1..size on ``mamba_allocator``; the
             ``free_mamba_cache``                      unified tree frees eviction results, not the
                                                       node's own tensor: no tree proof
===========  ===========================  ===========  ==========================================

KV and SWA frees are not refused: proving a KV slot's owner means reading live rows of
``req_to_token`` per free, far over the budget (guard v1 deduplicates and quarantines there).

Cost per free (guard on): two attribute reads and one ``finished()`` when nothing is indexed; else
the freed ids are read to the host (``tolist``: on a GPU one small device-to-host read) and looked
up in a dict.  Measured in ``benchmarks/bench_guard.py --free-path``.  Guard off: not installed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["FREE_PATHS", "FreePaths", "FreeRefuser", "tree_index"]

log = logging.getLogger("poolwatch.probe")
OnRefuse = Callable[[tuple[int, ...], tuple[str, ...], str], None]  # slots, owners, the path refused


@dataclass(frozen=True, slots=True)
class FreePaths:
    """Where one release family frees Mamba slots, and which proofs hold there."""

    allocator: str  # the attribute of ``req_to_token_pool`` whose ``free(ids)`` is wrapped
    slot: tuple[str, ...]  # a request's working slot, as an attribute path
    tree: bool  # the tree proof holds (eviction frees the node's own ``mamba_value``)
    request_free: bool  # ``req_to_token_pool.free_mamba_cache(req)`` clears the request's pointer


_ROW = FreePaths("mamba_pool", ("mamba_pool_idx",), tree=True, request_free=False)
_SPLIT = FreePaths("mamba_pool", ("mamba_pool_idx",), tree=True, request_free=True)
FREE_PATHS: dict[str, FreePaths] = {
    "0.5.4": _ROW,
    "0.5.5.post3": _ROW,
    "0.5.6": _ROW,
    "0.5.9": _SPLIT,
    "0.5.10": _SPLIT,
    "0.5.12": _SPLIT,
    "0.5.23": FreePaths("mamba_allocator", ("kv", "mamba_pool_idx"), tree=False, request_free=True),
}


def tree_index(tree_cache: Any) -> dict[int, tuple[Any, Any]]:
    """``{slot: (node, the node's mamba_value tensor)}`` over the tree (one walk, one host read)."""
    import torch

    root = getattr(tree_cache, "root_node", None)
    if root is None:
        return {}
    pairs: list[tuple[Any, Any]] = []
    stack = [root]
    while stack:
        node = stack.pop()
        value = getattr(node, "mamba_value", None)
        if value is not None and node is not root:
            pairs.append((node, value))
        stack.extend(getattr(node, "children", {}).values())
    if not pairs:
        return {}
    ids = torch.cat([v.reshape(-1).to(torch.int64) for _, v in pairs]).tolist()
    lengths = [int(v.numel()) for _, v in pairs]
    out: dict[int, tuple[Any, Any]] = {}
    at = 0
    for pair, n in zip(pairs, lengths, strict=True):
        for slot in ids[at : at + n]:
            out[int(slot)] = pair
        at += n
    return out


def _rid(req: Any) -> str:
    return str(getattr(req, "rid", "") or f"req@{id(req):x}")


def _path(obj: Any, names: tuple[str, ...]) -> Any:
    for name in names:
        obj = getattr(obj, name, None)
    return obj


class FreeRefuser:
    """The wrapped free paths of one rank's Mamba slots (installed only in guard mode)."""

    def __init__(
        self,
        sched: Any,
        on_refuse: OnRefuse,
        paused: Callable[[], bool] = lambda: False,
        paths: FreePaths = _ROW,
    ) -> None:
        self.sched, self.on_refuse, self.paused, self.paths = sched, on_refuse, paused, paths
        self.where = f"{paths.allocator}.free"
        self.owner: Any = None
        self.original: Callable[..., Any] | None = None
        self.pool: Any = None  # req_to_token_pool, when its free_mamba_cache is wrapped
        self.original_request: Callable[..., Any] | None = None
        self.tree: dict[int, tuple[Any, Any]] = {}
        self._live: tuple[Any, int | None] = (None, None)  # (the slot tensor, its id), read once
        self.refused = 0  # slots refused since the probe started
        self.fresh = False  # a refusal not yet published

    def install(self) -> bool:
        """Wrap the allocator's ``free`` (and ``free_mamba_cache``) on the instance; False if none."""
        pool = getattr(self.sched, "req_to_token_pool", None)
        owner = getattr(pool, self.paths.allocator, None)
        original = getattr(owner, "free", None)
        if owner is None or not callable(original) or "free" in getattr(owner, "__dict__", {}):
            return False
        self.owner, self.original = owner, original
        owner.free = self.free
        request = getattr(pool, "free_mamba_cache", None) if self.paths.request_free else None
        if callable(request) and "free_mamba_cache" not in getattr(pool, "__dict__", {}):
            self.pool, self.original_request = pool, request
            self.pool.free_mamba_cache = self.free_request
        return True

    def uninstall(self) -> None:
        if self.owner is not None and self.owner.__dict__.get("free") == self.free:
            del self.owner.free
        pool = self.pool
        if pool is not None and pool.__dict__.get("free_mamba_cache") == self.free_request:
            del pool.free_mamba_cache
        self.owner = self.original = self.pool = self.original_request = None

    def refresh(self) -> None:
        """Re-index the tree's Mamba values (at a Mamba census, a loop boundary)."""
        pool = getattr(self.sched, "req_to_token_pool", None)
        if not self.paths.tree or getattr(pool, "mamba_ckpt_pool", None) is not None:
            self.tree = {}  # no tree proof (int8 checkpoints: the tree's ids are another pool's)
            return
        self.tree = tree_index(getattr(self.sched, "tree_cache", None))

    def _live_slot(self) -> tuple[int | None, Any]:
        req = getattr(self.sched, "chunked_req", None)
        if req is None or req.finished():
            return None, None
        tensor = _path(req, self.paths.slot)
        if tensor is None:
            return None, None
        if self._live[0] is not tensor:
            flat = tensor.reshape(-1)
            self._live = (tensor, int(flat[0]) if int(flat.numel()) == 1 else None)
        return self._live[1], req

    def free(self, free_index: Any, *args: Any, **kwargs: Any) -> Any:
        assert self.original is not None
        try:
            keep = self._keep(free_index)
        except Exception:  # never in SGLang's way: an unreadable call is freed as asked
            log.debug("poolwatch guard: free check failed", exc_info=True)
            keep = None
        if keep is None:
            return self.original(free_index, *args, **kwargs)
        if int(keep.numel()) == 0:
            return None
        return self.original(keep, *args, **kwargs)

    def free_request(self, req: Any, *args: Any, **kwargs: Any) -> Any:
        """``free_mamba_cache(req, ...)``: refused whole for the live chunked request."""
        assert self.original_request is not None
        try:
            refuse = self._refuse_request(req)
        except Exception:
            log.debug("poolwatch guard: free_mamba_cache check failed", exc_info=True)
            refuse = False
        return None if refuse else self.original_request(req, *args, **kwargs)

    def _refuse_request(self, req: Any) -> bool:
        """Whether ``req`` is the live chunked request (then the refusal is recorded)."""
        if self.paused():
            return False
        live, chunked = self._live_slot()
        if live is None or req is not chunked:
            return False
        self._record([live], [_rid(req)], "free_mamba_cache")
        return True

    def _keep(self, free_index: Any) -> Any:
        """``None`` to free the call as it is, else the ids to free (refusals recorded)."""
        if self.paused():  # a kill switch is on: the probe is out of SGLang's way
            return None
        live, req = self._live_slot()
        if live is None and not self.tree:
            return None
        ids = free_index.tolist()  # 1-d in every call read (0-d and n-d flattened below)
        if not isinstance(ids, list) or (ids and isinstance(ids[0], list)):
            ids = free_index.reshape(-1).tolist()
        refused: list[int] = []
        owners: list[str] = []
        for slot in ids:
            if slot == live:
                refused.append(slot)
                owners.append(_rid(req))
            elif slot in self.tree and self._tree_owns(slot, free_index):
                refused.append(slot)
                owners.append("tree")
        if not refused:
            return None
        import torch

        kept = torch.tensor(
            [i for i in ids if i not in refused], dtype=free_index.dtype, device=free_index.device
        )
        self._record(refused, owners, self.where)
        return kept

    def _record(self, refused: list[int], owners: list[str], where: str) -> None:
        self.refused += len(refused)
        self.fresh = True
        try:  # the refusal stands even if recording it fails
            self.on_refuse(tuple(refused), tuple(dict.fromkeys(owners)), where)
        except Exception:
            log.warning("poolwatch guard: a refusal could not be recorded", exc_info=True)

    def _tree_owns(self, slot: int, free_index: Any) -> bool:
        node, value = self.tree[slot]
        if free_index is value or getattr(node, "mamba_value", None) is not value:
            del self.tree[slot]  # an eviction of that node, or the node moved on: no proof left
            return False
        return True
