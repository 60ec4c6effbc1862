"""Guard v2 on a pool of slot ids (the active Mamba pool, 0.5.23's int8 checkpoint pool).

Reads, at each wrapped free: the freed ids (``tolist``: on a GPU one small device-to-host read,
only while something is indexed or waits unread, or a chunked request is live) and the values the
tree took since the last such read, the chunked request's working slot, and the tree index's
entries for those ids.  Drops what one of two proofs shows owned:

* **live** (active Mamba pool only): the id is the working slot of ``chunked_req``, which is not
  finished -- the #12432 free;
* **tree**: the id is in the tree index (:mod:`~poolwatch.probe.sglang.guard.tree_index`) and the
  tree still holds it: up to 0.5.12 its node still holds that very tensor and the call is not
  freeing that tensor itself (eviction there frees ``node.mamba_value`` by identity before
  deleting the node: let through, entry forgotten); on 0.5.23 the tree's own flattened values,
  read again at the free, still list it (the unified tree clears a value before freeing it).

Two kinds of path:

* ``free(ids)`` of the slot allocator (or the checkpoint pool): the owned ids are dropped, the
  others freed in one call -- a refused id is never zeroed and never reaches the free list;
* ``free_mamba_cache(req)`` (0.5.9 on): the call frees the request's slot *and* clears its pointer,
  so refusing only the id inside would leave the request slotless and the slot leaked.  A call for
  the live chunked request is refused whole: nothing freed, nothing cleared (its ping-pong track
  slots stay with it too).

Ping-pong track slots are never refused on their own (SGLang rotates them on live requests).
Cost on a healthy free: two attribute reads and one ``finished()`` when nothing is indexed; else
one host read of the freed ids, one of each value the tree took since the last such read, and a
dict lookup per id (``benchmarks/bench_guard.py --free-path``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from poolwatch.model.rank import Pool
from poolwatch.probe.sglang.guard.patch import Patch, patch
from poolwatch.probe.sglang.guard.pending import Pending
from poolwatch.probe.sglang.guard.tree_index import (
    Owned,
    TreeHooks,
    current_values,
    node_index,
    value_ids,
    values_index,
)

__all__ = ["MAX_UNREAD", "Live", "Record", "SlotGuard", "chunked_slot", "rid"]

MAX_UNREAD = 256  # values the tree took, kept unread until a free consults the index (then read)

log = logging.getLogger("poolwatch.probe")
Record = Callable[[Pool, list[int], list[str], str, int], None]  # pool, ids, owners, where, page
Live = Callable[[], tuple[int | None, Any]]  # the chunked request's working slot, and the request


def rid(req: Any) -> str:
    return str(getattr(req, "rid", "") or f"req@{id(req):x}")


def _path(obj: Any, names: tuple[str, ...]) -> Any:
    for name in names:
        obj = getattr(obj, name, None)
    return obj


def chunked_slot(sched: Any, slot: tuple[str, ...]) -> Live:
    """The live proof's reader: ``(slot id, chunked_req)`` while a chunked request is live, else
    ``(None, None)``; the slot tensor's id is read once per tensor (it changes only with a new slot)."""
    seen: list[Any] = [None, None]  # (the slot tensor, its id)

    def live() -> tuple[int | None, Any]:
        req = getattr(sched, "chunked_req", None)
        if req is None or req.finished():
            return None, None
        tensor = _path(req, slot)
        if tensor is None:
            return None, None
        if seen[0] is not tensor:
            flat = tensor.reshape(-1)
            seen[0], seen[1] = tensor, int(flat[0]) if int(flat.numel()) == 1 else None
        return seen[1], req

    return live


class SlotGuard:
    """The wrapped ``free(ids)`` of one slot pool (installed only in guard mode)."""

    def __init__(
        self,
        pool: Pool,
        where: str,
        record: Record,
        paused: Callable[[], bool],
        *,
        live: Live | None = None,
        tree: str = "",
        pending: Pending | None = None,
    ) -> None:
        self.pool, self.where, self.record, self.paused = pool, where, record, paused
        self.live, self.kind, self.pending = live, tree, pending  # tree: "node", "flat" or ""
        self.tree: Owned = {}
        self.unread: list[Any] = []  # tensors the tree took since the census, not read yet (took)
        self.hooks: TreeHooks | None = None  # the tree's own frees pass (and forget what they free)
        self.values: Callable[[], set[int]] | None = None
        self.patched: Patch | None = None

    def install(self, owner: Any) -> bool:
        """Wrap ``owner.free`` on the instance; False if there is none (or it is already wrapped)."""
        self.patched = patch(owner, "free", self._wrap)
        return self.patched is not None

    def uninstall(self) -> None:
        if self.patched is not None:
            self.patched.undo()
            self.patched = None

    def refresh(self, tree_cache: Any) -> None:
        """Re-index the tree's values (at a Mamba census, a loop boundary)."""
        self.unread = []  # (the census reads what the tree holds now, those values included)
        if self.kind == "node":
            self.tree = node_index(tree_cache)
            return
        self.values = current_values(tree_cache) if self.kind == "flat" else None
        self.tree = values_index(self.values) if self.values is not None else {}

    def clear(self) -> None:
        """No tree proof (the tree's states are another pool's): nothing indexed, nothing unread."""
        self.tree, self.unread = {}, []

    def took(self, value: Any) -> None:
        """The tree took the tensor ``value`` since the census.  Its ids are read when a free first
        consults the index (:meth:`read`), not here: most insertions meet no such free before the
        next census (up to 0.5.12 the tree keeps the request's slot, and no Mamba free runs on the
        healthy path), and on a GPU each read is a device read in the scheduler's loop.  Read here
        only once :data:`MAX_UNREAD` wait."""
        if self.kind in ("flat", "node"):
            self.unread.append(value)
            if len(self.unread) > MAX_UNREAD:
                self.read()

    def read(self) -> None:
        """Index the values taken since the last read: ``flat``, checked again at a free naming
        one; ``node``, owned until the tree frees that very tensor.  A value that cannot be read
        gives no proof (a miss, never a refusal)."""
        unread, self.unread = self.unread, []
        for value in unread:
            try:
                ids = value_ids([value])
            except Exception:
                log.debug("poolwatch guard: an inserted value is unreadable", exc_info=True)
                continue
            self.tree.update(dict.fromkeys(ids, None if self.kind == "flat" else (None, value)))

    def _wrap(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def free(free_index: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                keep = self.keep(free_index)
            except Exception:  # never in SGLang's way: an unreadable call is freed as asked
                log.debug("poolwatch guard: free check failed", exc_info=True)
                keep = None
            if keep is None:
                return original(free_index, *args, **kwargs)
            if int(keep.numel()) == 0:
                return None
            return original(keep, *args, **kwargs)

        return free

    def keep(self, free_index: Any) -> Any:
        """``None`` to free the call as it is, else the ids to free (refusals recorded)."""
        if self.paused():  # a kill switch is on: the probe is out of SGLang's way
            return None
        live, req = self.live() if self.live is not None else (None, None)
        pending = self.pending.slot_map() if self.pending is not None else {}
        if live is None and not self.tree and not self.unread and not pending:
            return None
        ids = self._freed(free_index)
        if self.hooks is not None and self.hooks.freeing:  # the tree frees its own values
            for slot in ids:
                self.tree.pop(slot, None)
            return None
        refused: list[int] = []
        owners: list[str] = []
        now: set[int] | None = None  # the tree's values at this free ("flat"), read once if needed
        for slot in ids:
            if slot == live:
                refused.append(slot)
                owners.append(rid(req))
            elif (sender := pending.get(slot)) is not None:
                refused.append(slot)
                owners.append(f"{rid(sender)} (transfer pending)")
            elif slot in self.tree:
                if self.kind == "flat" and now is None:
                    now = self._now()
                if self._tree_owns(slot, free_index, now):
                    refused.append(slot)
                    owners.append("tree")
        if not refused:
            return None
        import torch

        kept = torch.tensor(
            [i for i in ids if i not in refused], dtype=free_index.dtype, device=free_index.device
        )
        self.record(self.pool, refused, owners, self.where, 1)
        return kept

    def _freed(self, free_index: Any) -> list[int]:
        """The ids a free names (one host read), the values the tree took since the last read
        indexed before the index is consulted."""
        ids = free_index.tolist()  # 1-d in every call read (0-d and n-d flattened below)
        if not isinstance(ids, list) or (ids and isinstance(ids[0], list)):
            ids = free_index.reshape(-1).tolist()
        if self.unread:
            self.read()
        return ids  # type: ignore[no-any-return]

    def _now(self) -> set[int]:
        try:
            return self.values() if self.values is not None else set()
        except Exception:  # unreadable now: no proof
            log.debug("poolwatch guard: tree values unreadable at a free", exc_info=True)
            return set()

    def _tree_owns(self, slot: int, free_index: Any, now: set[int] | None) -> bool:
        """Whether the tree still holds ``slot``; an entry with no proof left is forgotten."""
        entry = self.tree[slot]
        if entry is None:  # "flat": the tree's values read at this free
            owned = now is not None and slot in now
        else:  # "node": the node still holds that tensor, and this is not its own eviction
            node, value = entry  # node None: inserted since the census, its node not yet read
            held = node is None or getattr(node, "mamba_value", None) is value
            owned = held and free_index is not value
        if not owned:
            del self.tree[slot]
        return owned
