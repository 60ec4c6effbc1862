"""S09: hybrid SWA + EAGLE: the out-of-window free's frontier is one bigram short, and the tree's
prefix is freed as the request's own (PR #34870; gated by #34823).

With ``SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS`` on, ``UnifiedRadixCache``'s
``cache_unfinished_req`` frees a chunked request's SWA slots below a frontier it computes from the
token count, but EAGLE's bigram keys are one entry shorter, so the insert stops a page lower than
the frontier assumes; the re-match then refuses the new leaf (less than a window of live SWA),
the request's protected length never advances, and when it finishes the tree's prefix -- which it
owns -- is freed as the request's duplicate: free and in the tree at once.  On 0.5.17 the option
is off by default (the entry turns it on, as an operator would); 0.5.18 takes the frontier from the
key's length (and turns the option on by default).
"""

from __future__ import annotations

import os
from typing import Any

from rigs.bugs.entry import Bug, outcome

BUG = Bug(
    id="S09",
    engine="sglang",
    title="SWA + EAGLE: the out-of-window frontier misses a bigram and the tree's prefix is freed",
    issue="https://github.com/sgl-project/sglang/pull/34870",
    fix="https://github.com/sgl-project/sglang/pull/34870",
    bug_class="double-free",
    affected="0.5.17",
    fixed="0.5.18",
    trigger="a chunked prefill's boundary on an SWA + EAGLE rank with the out-of-window free on",
)

PAGE, WINDOW, KV, CHUNK = 64, 127, 64 * 40, 1024


def run(release: str, *, guard: bool = False) -> dict[str, Any]:
    """The trigger on ``release`` (``guard``: with the probe's guard on, the row adds what it refused
    and the pools after, :func:`~rigs.bugs.sglang.flows.guarded`)."""
    os.environ["SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS"] = "1"  # 0.5.17's opt-in
    from rigs.bugs.sglang.flows import guarded, idle, turn
    from rigs.sglang.driver import Driver
    from rigs.sglang.server_args import DENSE
    from rigs.timeline import Timeline

    timeline = Timeline()
    d = Driver(release, timeline=timeline)
    d.new(
        "null",
        guard=guard,
        kv=KV,
        rows=4,
        context=4096,
        window=(PAGE, WINDOW, True),
        server={"model_path": str(DENSE), "page_size": PAGE},
    )
    r = d.arrive("r", list(range(1, CHUNK + PAGE + 1)), vocab_size=100000)
    d.windowed_chunk(r, CHUNK)  # the first chunk
    d.loop()
    step = turn(d)
    d.windowed_boundary(r)  # the trigger: the chunk boundary's out-of-window free and insert
    split = d.sched.tree_cache.full_evictable_size() > 0 and r.cache_protected_len == 0
    d.loop()
    d.windowed_chunk(r, CHUNK + PAGE)  # the last chunk
    d.loop()
    d.windowed_finish(r)  # its release frees what it believes its own
    both = _free_and_in_tree(d)
    if split and both:
        timeline.wrong(
            step, f"the tree takes the chunk but the request keeps it: {len(both)} slots freed twice"
        )
    idle(d)
    row = {**timeline.row(), "free_and_in_tree": len(both), **(guarded(d) if guard else {})}
    return outcome(release, bool(split and both), row)


def _free_and_in_tree(d: Any) -> list[int]:
    from rigs.bugs.sglang.flows import free_ids

    pages = free_ids(d.sched.token_to_kv_pool_allocator.full_attn_allocator)
    tree = d.sched.tree_cache
    values = tree.all_values_flatten().tolist() if hasattr(tree, "all_values_flatten") else []
    return sorted(v for v in values if v // PAGE in pages)
