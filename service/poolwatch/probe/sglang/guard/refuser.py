"""Guard v2's one object per rank: every free path of the family wrapped, one record of what it refused.

Built by the SGLang probe in guard mode on a release whose wheels were read
(:data:`~poolwatch.probe.sglang.guard.paths.GUARD_PATHS`); given back on detach.  It installs:

* the active Mamba pool's ``free(ids)`` (:class:`~poolwatch.probe.sglang.guard.slots.SlotGuard`,
  proofs *live* and *tree*) and, from 0.5.9, ``free_mamba_cache(req)`` -- refused whole for the
  live chunked request, since it also clears the request's pointer;
* 0.5.23's int8 checkpoint pool's ``free`` (proof *tree*), whenever the pool exists (the pool
  may be attached after the scheduler: each refresh looks again);
* the KV allocator's entry points and the request pool's row book
  (:class:`~poolwatch.probe.sglang.guard.kv.KvGuard`, proofs *released row*, *free*, *tree
  prefix* and *pending transfer*);
* the ownership index kept at the free, not at the census
  (:mod:`~poolwatch.probe.sglang.guard.owners`, :class:`~poolwatch.probe.sglang.guard.tree_index.TreeHooks`):
  a PD rank's pending transfers (a prefill rank's inflight queue, a decode rank's transfer and
  pre-allocation queues; SGLang's own queue processing wrapped as its window) and, on 0.5.23, the
  unified tree's insertions, HiCache load-backs and own frees.

Each refusal is recorded at once, from inside the wrapped free (scheduler thread), through
``on_refuse`` -- the probe's, which records it in its :class:`~poolwatch.probe.core.repairs.RepairLog`
and publishes it at the next hook.  A refusal stands even if recording it fails.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from poolwatch.model.rank import Pool
from poolwatch.probe.sglang.guard.kv import KvGuard
from poolwatch.probe.sglang.guard.owners import TreePrefix
from poolwatch.probe.sglang.guard.patch import Patch, patch
from poolwatch.probe.sglang.guard.paths import GUARD_PATHS, GuardPaths
from poolwatch.probe.sglang.guard.pending import Pending
from poolwatch.probe.sglang.guard.rows import RowBook
from poolwatch.probe.sglang.guard.slots import SlotGuard, chunked_slot, rid
from poolwatch.probe.sglang.guard.takes import Takes
from poolwatch.probe.sglang.guard.tree_index import TreeHooks

__all__ = ["FreeRefuser", "OnRefuse"]

log = logging.getLogger("poolwatch.probe")
# pool, ids (pages when page > 1), owners, the path refused, page size
OnRefuse = Callable[[Pool, tuple[int, ...], tuple[str, ...], str, int], None]


class FreeRefuser:
    """The wrapped free paths of one rank (installed only in guard mode)."""

    def __init__(
        self,
        sched: Any,
        on_refuse: OnRefuse,
        paused: Callable[[], bool] = lambda: False,
        paths: GuardPaths = GUARD_PATHS["0.5.4"],
    ) -> None:
        self.sched, self.on_refuse, self.paused, self.paths = sched, on_refuse, paused, paths
        self.live = chunked_slot(sched, paths.mamba.slot)
        self.mamba: SlotGuard | None = None
        self.checkpoints: SlotGuard | None = None
        self.request: Patch | None = None  # free_mamba_cache
        self.rows: RowBook | None = None
        self.kv: KvGuard | None = None
        self.pending: Pending | None = None  # a PD rank's transfers still pending
        self.hooks: TreeHooks | None = None  # the unified tree's insertions and own frees
        self.refused = 0  # slots (pages: ids) refused since the probe started

    # -- install / uninstall -------------------------------------------------------------------

    def install(self) -> bool:
        """Wrap every free path this rank has; False if it has none."""
        pool = getattr(self.sched, "req_to_token_pool", None)
        pending = Pending(self.sched, self.paths.mamba.slot, (*self.paths.protected[:-1], "req_pool_idx"))
        self.pending = pending if pending.install() else None
        self._install_mamba(pool)
        self._install_checkpoints(pool)
        rows, takes = RowBook(pool), None
        if rows.install():
            prefix = TreePrefix(self.sched, rows.holder, self.paths.protected)
            takes = Takes(prefix.row) if self.paths.takes and prefix.protected is not None else None
            kv = KvGuard(self.sched, rows, self._record, self.paused, prefix, self.pending, takes)
            if kv.install(self.paths.kv_entries, self.paths.direct_kv, self.paths.row_first):
                self.rows, self.kv = rows, kv
                rows.given = takes.forget if takes is not None else None
            else:
                rows.uninstall()
        self._install_hooks(takes if self.kv is not None else None)
        return any((self.mamba, self.checkpoints, self.kv))

    def _install_mamba(self, pool: Any) -> None:
        mamba = self.paths.mamba
        guard = SlotGuard(
            Pool.MAMBA,
            f"{mamba.allocator}.free",
            self._record,
            self.paused,
            live=self.live,
            tree=mamba.tree,
            pending=self.pending,
        )
        if not guard.install(getattr(pool, mamba.allocator, None)):
            return
        self.mamba = guard
        if mamba.request_free:
            self.request = patch(pool, "free_mamba_cache", self._wrap_request)

    def _install_checkpoints(self, pool: Any) -> None:
        ckpt = getattr(pool, "mamba_ckpt_pool", None)
        if not self.paths.checkpoints or ckpt is None or self.checkpoints is not None:
            return
        guard = SlotGuard(Pool.MAMBA_CKPT, "mamba_ckpt_pool.free", self._record, self.paused, tree="flat")
        if guard.install(ckpt):
            guard.hooks = self.hooks
            self.checkpoints = guard

    def _install_hooks(self, takes: Takes | None) -> None:
        """The tree's insertions and (from 0.5.17) its own frees, where the family has a tree proof
        (and ``takes``: the KV columns each insertion keeps of a request's row)."""
        tree = getattr(self.sched, "tree_cache", None)
        mamba = bool(self.paths.mamba.tree) and (self.mamba is not None or self.checkpoints is not None)
        if tree is None or not (mamba or takes is not None):
            return
        loaded = self.refresh if mamba and self.paths.mamba.tree == "flat" else None
        hooks = TreeHooks(tree, self._took, loaded, takes)
        if not hooks.install():
            return
        self.hooks = hooks
        for guard in (self.mamba, self.checkpoints):
            if guard is not None:
                guard.hooks = hooks

    def _took(self, value: Any, checkpoint: bool) -> None:
        """An insertion gave the tree ``value`` (checkpoint slots when the checkpoint pool holds the
        tree's states): indexed from the next free that consults the index, not at the next census
        (a checkpoint pool attached since the install is wrapped first)."""
        if checkpoint and self.checkpoints is None:
            self._install_checkpoints(getattr(self.sched, "req_to_token_pool", None))
        guard = self.checkpoints if checkpoint else self.mamba
        if guard is not None:
            guard.took(value)

    def uninstall(self) -> None:
        for guard in (self.mamba, self.checkpoints, self.kv, self.rows, self.pending, self.hooks):
            if guard is not None:
                guard.uninstall()
        if self.request is not None:
            self.request.undo()
        self.mamba = self.checkpoints = self.kv = self.rows = self.request = None
        self.pending = self.hooks = None

    # -- the tree index --------------------------------------------------------------------------

    def refresh(self) -> None:
        """Re-index the tree's Mamba values (at a Mamba census, a loop boundary).  The active pool's
        tree proof is off while an int8 checkpoint pool holds the tree's states (their ids are the
        checkpoint pool's)."""
        pool = getattr(self.sched, "req_to_token_pool", None)
        tree = getattr(self.sched, "tree_cache", None)
        if self.pending is not None:
            self.pending.see()
        self._install_checkpoints(pool)
        ckpt = getattr(pool, "mamba_ckpt_pool", None)
        if self.mamba is not None:
            if ckpt is None:
                self.mamba.refresh(tree)
            else:
                self.mamba.clear()
        if self.checkpoints is not None:
            self.checkpoints.refresh(tree)

    # -- free_mamba_cache(req) -----------------------------------------------------------------

    def _wrap_request(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def free_request(req: Any, *args: Any, **kwargs: Any) -> Any:
            """``free_mamba_cache(req, ...)``: refused whole for the live chunked request."""
            try:
                refuse = self._refuse_request(req)
            except Exception:
                log.debug("poolwatch guard: free_mamba_cache check failed", exc_info=True)
                refuse = False
            return None if refuse else original(req, *args, **kwargs)

        return free_request

    def _refuse_request(self, req: Any) -> bool:
        """Whether ``req`` is the live chunked request (then the refusal is recorded)."""
        if self.paused():
            return False
        live, chunked = self.live()
        if live is None or req is not chunked:
            return False
        self._record(Pool.MAMBA, [live], [rid(req)], "free_mamba_cache", 1)
        return True

    # -- recording ---------------------------------------------------------------------------------

    def _record(self, pool: Pool, refused: list[int], owners: list[str], where: str, page: int) -> None:
        self.refused += len(refused)
        try:  # the refusal stands even if recording it fails
            self.on_refuse(pool, tuple(refused), tuple(dict.fromkeys(owners)), where, page)
        except Exception:
            log.warning("poolwatch guard: a refusal could not be recorded", exc_info=True)
