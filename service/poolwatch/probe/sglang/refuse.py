"""Guard v2 (guard mode only): refuse a Mamba free whose slot is provably still owned.

Guard v1 (:mod:`poolwatch.probe.sglang.repair`) takes a wrongly freed slot back off the free list at
the next hook, after the pool's ``free`` already ran -- and on 0.5.4 ``MambaPool.free`` zeroes the
slot's conv and temporal state, so the request it belonged to goes on from a zeroed state.  Guard
v2 wraps the pool's ``free`` *on the instance* (never the class, never without guard mode) and
drops, before the original runs, every id of the call that one of two proofs (the census's own)
shows to be owned:

* **live**: the id is the working slot (``mamba_pool_idx``) of ``chunked_req``, which is not
  finished -- the #12432 free;
* **tree**: the id is a tree node's ``mamba_value`` in the index taken at the last Mamba census,
  the node still holds that very tensor, and the call is not freeing that tensor itself (an
  eviction frees ``node.mamba_value`` by identity, and is let through and forgotten).

The other ids are freed by the original in one call; a refused id is not zeroed and not pushed.
Each refusal is a :class:`~poolwatch.model.Repair` of kind ``refuse`` (counted, logged, published
and alerted on like a repair).  Ping-pong track slots are never refused: SGLang rotates them on
live requests.

=================  =======================  ============  =============================================
family             wrapped ``free``         proofs        why
=================  =======================  ============  =============================================
0.5.4 (to 5.post2) ``mamba_pool.free``      live, tree    #12432 releases; free paths read in the
                                                          0.5.4.post1 wheel (row free with the Mamba
                                                          default, fork release, eviction by node)
0.5.5.post3, 0.5.6 --                       --            not re-read for this; guard v1 only
0.5.9              ``mamba_pool.free``      live, tree    read in the 0.5.9 wheel: the chunked request
                                                          keeps its slot, eviction frees by node
0.5.10, 0.5.12     --                       --            not read; guard v1 only
0.5.23             --                       --            a live request's working slot is freed on
                                                          purpose (external-linker load swaps it);
                                                          the tree is component-based; guard v1 only
=================  =======================  ============  =============================================

Cost per free (guard on): two attribute reads and one ``finished()`` when nothing is indexed; else
the freed ids are read to the host (``tolist``: on a GPU one small device-to-host read) and looked
up in a dict.  Measured in ``benchmarks/bench_guard.py --free-path``.  Guard off: not installed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

__all__ = ["REFUSING_FAMILIES", "FreeRefuser", "tree_index"]

log = logging.getLogger("poolwatch.probe")
REFUSING_FAMILIES = frozenset({"0.5.4", "0.5.9"})
OnRefuse = Callable[[tuple[int, ...], tuple[str, ...]], None]


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


class FreeRefuser:
    """The wrapped ``free`` of one rank's Mamba pool (installed only in guard mode)."""

    def __init__(self, sched: Any, on_refuse: OnRefuse, paused: Callable[[], bool] = lambda: False) -> None:
        self.sched, self.on_refuse, self.paused = sched, on_refuse, paused
        self.owner: Any = None
        self.original: Callable[..., Any] | None = None
        self.tree: dict[int, tuple[Any, Any]] = {}
        self._live: tuple[Any, int | None] = (None, None)  # (the slot tensor, its id), read once
        self.refused = 0  # slots refused since the probe started
        self.fresh = False  # a refusal not yet published

    def install(self) -> bool:
        """Wrap ``req_to_token_pool.mamba_pool.free`` on the instance; False if there is none."""
        owner = getattr(getattr(self.sched, "req_to_token_pool", None), "mamba_pool", None)
        original = getattr(owner, "free", None)
        if owner is None or not callable(original) or "free" in getattr(owner, "__dict__", {}):
            return False
        self.owner, self.original = owner, original
        owner.free = self.free
        return True

    def uninstall(self) -> None:
        if self.owner is not None and self.owner.__dict__.get("free") == self.free:
            del self.owner.free
        self.owner = self.original = None

    def refresh(self) -> None:
        """Re-index the tree's Mamba values (at a Mamba census, a loop boundary)."""
        self.tree = tree_index(getattr(self.sched, "tree_cache", None))

    def _live_slot(self) -> tuple[int | None, Any]:
        req = getattr(self.sched, "chunked_req", None)
        if req is None or req.finished():
            return None, None
        tensor = getattr(req, "mamba_pool_idx", None)
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
        self.refused += len(refused)
        self.fresh = True
        try:  # the refusal stands even if recording it fails
            self.on_refuse(tuple(refused), tuple(dict.fromkeys(owners)))
        except Exception:
            log.warning("poolwatch guard: a refusal could not be recorded", exc_info=True)
        return kept

    def _tree_owns(self, slot: int, free_index: Any) -> bool:
        node, value = self.tree[slot]
        if free_index is value or getattr(node, "mamba_value", None) is not value:
            del self.tree[slot]  # an eviction of that node, or the node moved on: no proof left
            return False
        return True
