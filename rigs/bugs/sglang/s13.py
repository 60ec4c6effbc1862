"""S13: PD decode with its own radix tree and KV offload frees the tree's prefix slots a second time
and drops the request's lock by hand (#27666; fixed by PR #25836, #27687, #32170).

With ``--disaggregation-decode-enable-radix-cache`` and ``--disaggregation-decode-enable-offload-
kvcache`` the decode rank matches a transferred request against its tree and locks the match, and
``process_prebuilt`` hands the prompt to the tree, which then owns it.  When the request finishes
and its copy to host is done, 0.5.11 - 0.5.20's offload manager frees the request's whole row --
the tree's prefix slots included -- and subtracts the prefix from ``protected`` instead of
unlocking the node: the slots are both free and in the tree (a double free), a node stays locked
with no request, and the counters cancel, so SGLang's conservation check passes.  A second request
with the same prompt reuses the freed prefix and frees it again; ``protected`` goes negative and
the pool-usage figure SGLang's metrics and decode log compute asserts.  0.5.21 frees only the
request's own slots and unlocks it through the tree.
"""

from __future__ import annotations

from typing import Any

from rigs.bugs.entry import Bug, outcome

BUG = Bug(
    id="S13",
    engine="sglang",
    title="PD decode radix cache + offload frees the tree's prefix slots again",
    issue="https://github.com/sgl-project/sglang/issues/27666",
    fix="https://github.com/sgl-project/sglang/pull/32170",
    bug_class="double-free",
    affected="0.5.20",
    fixed="0.5.21",
    trigger="the offload manager releases a finished request on a PD decode rank with its own radix tree",
)

SERVER = {
    "model_path": "",  # (the weightless dense model, set in run)
    "disaggregation_mode": "decode",
    "disaggregation_transfer_backend": "nixl",
    "disaggregation_decode_enable_radix_cache": True,
    "disaggregation_decode_enable_offload_kvcache": True,
    "hicache_storage_backend": "file",
}


def run(release: str, *, guard: bool = False) -> dict[str, Any]:
    """The trigger on ``release`` (``guard``: with the probe's guard on, the row adds what it refused
    and the pools after, :func:`~rigs.bugs.sglang.flows.guarded`)."""
    from rigs.sglang.driver import Driver
    from rigs.sglang.server_args import DENSE
    from rigs.timeline import Timeline

    timeline = Timeline()
    d = Driver(release, timeline=timeline)
    server = {**SERVER, "model_path": str(DENSE)}
    d.new("decode", guard=guard, kv=256, rows=8, context=512, dense="radix", pre_alloc=8, server=server)
    d.open_offload()
    struck = False
    for rid in ("r1", "r2"):  # two requests with the same prompt: the second reuses the prefix
        struck = _serve(d, timeline, rid) or struck
    _idle(d, timeline)
    tree = d.sched.tree_cache
    row = {**timeline.row(), "protected_after": int(tree.protected_size())}
    if guard:
        from rigs.bugs.sglang.flows import guarded

        row.update(guarded(d))
    return outcome(release, struck, row)


def _serve(d: Any, timeline: Any, rid: str) -> bool:
    from rigs.bugs.sglang.flows import decoded_then_offloaded, prefilled

    r = prefilled(d, rid, list(range(100, 112)), max_new=3)
    step = decoded_then_offloaded(d, r)  # the trigger: the copy done, the release frees the request
    both = _free_and_in_tree(d)
    if both:
        timeline.wrong(step, f"{rid}'s release frees {len(both)} slots the tree still holds ({both[:4]}...)")
    return bool(both)


def _free_and_in_tree(d: Any) -> list[int]:
    from rigs.bugs.sglang.flows import free_ids

    tree, free = d.sched.tree_cache, free_ids(d.sched.token_to_kv_pool_allocator)
    held: set[int] = set()
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        stack.extend(node.children.values())
        if node is not tree.root_node and node.value is not None:
            held |= set(node.value.tolist())
    return sorted(free & held)


def _idle(d: Any, timeline: Any) -> None:
    """An idle turn: SGLang's own idle check, then the pool-usage figure its metrics and decode log
    compute from the same stats (it asserts on a negative usage)."""
    from rigs.bugs.sglang.flows import idle

    idle(d)
    try:
        d.sched.pool_stats_observer.get_pool_stats().get_max_pool_usage()
    except AssertionError as exc:
        timeline.engine_said(d.steps, f"AssertionError in the pool usage: {str(exc)[:80]}")
