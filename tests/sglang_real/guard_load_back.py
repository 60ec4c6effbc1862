"""Guard during HiCache's load-back, on a release's own classes: a dense rank whose tree is the
release's own HiCache tree -- ``HiRadixCache`` (:mod:`rigs.sglang.hicache_tree`; from 0.5.17 built
by its own constructor, :mod:`rigs.sglang.hicache_built`), from 0.5.19 ``UnifiedRadixCache`` with
the host pool group its ``init_hicache`` attaches -- with its host pool and cache controller, the
device<->host copies stood in as finished.

A request's prompt is written through to host and its device copy evicted (the host copy kept);
a second request matches it on host and the ``PrefillAdder``'s load-back (SGLang's own
``init_load_back``) gives the prefix device slots again: the tree's, locked by the load until
``loading_check`` acknowledges it, and the first columns of the request's row up to its
``cache_protected_len`` (``last_matched_prefix_len`` before 0.5.6, on ``req.kv`` from 0.5.19),
which the adder sets past the loaded part.

* **healthy** (guard on): the load-back, the load's acknowledgement, decode, the request's own
  release, the tree evicting the loaded slots to host again and the rank idle: guard refuses and
  repairs nothing, and SGLang's own idle check passes;
* **a double free of the loaded-back slots** (three ways: fixed, guard off, guard on;
  :func:`tests.sglang_real.guard_pools.wrong_free_checks`): S13's extra free -- the request's
  prefix columns freed through its row, here the slots the load-back just gave the tree -- is
  refused at the free by the tree-prefix proof (:mod:`poolwatch.probe.sglang.guard.owners`), the
  state bit-identical to the fixed path's.  From 0.5.9 only: that proof reads the row's request
  where the row allocation names it (``alloc(reqs)``); a dense rank up to 0.5.6 takes its rows with
  ``ReqToTokenPool.alloc(need_size)``, which names none, so there guard lets the free run and
  quarantines the slots at the next loop hook (the census sees them free and in the tree).

On the unified tree (0.5.19 on) the host pool is read coarsely (size and free: no host gap to read,
:func:`tests.sglang_real.guard_pools.balanced`); its Mamba load-back is guard's ``tree_index`` hook,
tested on fakes in ``tests/probe/sglang``.
"""

from __future__ import annotations

from typing import Any

from rigs.checks import report
from rigs.sglang.driver import Driver
from tests.sglang_real.guard_pools import _idle, balanced, wrong_free_checks

__all__ = ["guard_load_back_checks"]

PROMPT = list(range(40, 88))  # a's prompt: 48 tokens, past the tree's load-back threshold (10)
SERVER = {"enable_hierarchical_cache": True, "hicache_write_policy": "write_through"}


def _hicache_rank(d: Driver, *, guard: bool) -> None:
    from rigs.sglang.server_args import DENSE

    d.new("null", guard=guard, kv=256, rows=4, context=256, dense="hiradix",
          server={**SERVER, "model_path": str(DENSE)})  # fmt: skip
    d.open_hicache()


def _protected(req: Any) -> int:
    """The columns of the request's row the tree owns (what the adder set after the load-back: on
    ``req.kv`` from 0.5.19)."""
    held = req.kv if getattr(getattr(req, "kv", None), "cache_protected_len", None) is not None else req
    n = getattr(held, "cache_protected_len", None)
    return int(n) if isinstance(n, int) else int(req.last_matched_prefix_len)


def _loaded_back(d: Driver, mark: dict[str, Any]) -> None:
    """a's prompt to host and off the device; b's match loaded back; (the fault) the loaded slots
    freed again through b's row; the load acknowledged, b decodes and finishes, the tree evicts."""
    _hicache_rank(d, guard=mark["guard"])
    s = d.sched
    a = d.arrive("a", PROMPT)
    d.admit(a)  # the prompt written through to host (its node locked until acknowledged)
    d.decode()
    d.finish(a)
    d.hicache_events()  # the write-throughs acknowledged: the nodes unlocked
    d.boundary()
    d.evict(tokens=256, mamba=0)  # the device copies freed, the host copies kept
    b = d.arrive("b", [*PROMPT, 7, 5])  # a's prompt and first token: on host only
    batch = d.prefill([b])  # the adder's load-back: device slots again, b's prefix columns
    row, owned = int(d.record(b).req_pool_idx), _protected(b)
    mark["loaded"] = int(s.loaded_back)
    d.prefill_done(batch)
    if mark["fault"]:  # S13's extra free: b's prefix columns, the loaded-back slots, through its row
        s.token_to_kv_pool_allocator.free(s.req_to_token_pool.req_to_token[row, :owned])
    mark["after"] = d.state()
    d.boundary()
    d.hicache_events()  # the load acknowledged: the loaded node unlocked
    d.decode()
    d.finish(b)
    d.hicache_events()
    d.evict(tokens=256, mamba=0)


def _healthy(d: Driver) -> None:
    mark: dict[str, Any] = {"fault": False, "guard": True}
    _loaded_back(d, mark)
    leak, gap = _idle(d)
    tree = d.sched.tree_cache
    report(
        f"{d.release.version} HiCache, guard on: a prefix written to host, evicted from the device, loaded "
        "back by SGLang's own init_load_back, acknowledged, decoded, released and evicted again -- "
        "zero refusals, zero repairs, SGLang's idle check passes",
        mark["loaded"] >= len(PROMPT)
        and d.actions() == []
        and not leak
        and balanced(gap)
        and not tree.ongoing_load_back,
        {"loaded": mark["loaded"], "actions": d.actions(), "leak": leak[:300], "gaps": gap},
    )


def guard_load_back_checks(d: Driver) -> None:
    _healthy(d)
    if d.release.legacy:  # no row holder on a dense rank: repaired at the next hook, not refused
        return
    what = "the slots a HiCache load-back just gave the tree freed again through the row"
    wrong_free_checks(d, (("full", what, _loaded_back, False),))
