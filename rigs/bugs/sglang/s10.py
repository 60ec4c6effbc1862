"""S10: EAGLE at ``page_size > 1`` records an unaligned ``kv_allocated_len``, which the PRs call a
stranded tail page (sglang#13741 / PR #13826, PR #31616).

Spec v2's ``EagleDraftInput.prepare_for_decode`` tops every running request up to
``kv_committed_len + 2 * get_alloc_len_per_decode``; up to 0.5.16 that length is not rounded to a
page, while the paged allocator hands out whole pages (PR #31616, in 0.5.17, rounds it up).  The
entry runs that path on 0.5.13 -- the release's own pools, ``Req`` objects, ``prepare_for_decode``
and ``release_kv_cache`` (:mod:`rigs.sglang.spec`; the model's acceptance and two Triton kernels
stood in) -- with the probe and detector attached, eight requests at a time through 40 decode
steps at page 4, each finished request released, then one idle turn and SGLang's own check.  The
control applies PR #31616's idea (``0.5.13+fix``: the same pages, ``kv_allocated_len`` at the page
end).  Not reproduced: every page comes back.  The unaligned tail shares its page with the last
recorded slot, ``release_kv_cache`` frees ``[ceil_page(kv_committed_len), kv_allocated_len)`` of the
row and the chunk cache the committed part, and a paged free gives back whole pages (the entry
counts the unaligned allocations, to show the path ran).  #13826's spec v1 paths (closed, not
merged) reset ``kv_allocated_len`` to the committed length at every verify; 0.5.8 writes that for
every topk and page size.
"""

from __future__ import annotations

import random
from typing import Any

from rigs.bugs.entry import Bug, outcome

BUG = Bug(
    id="S10",
    engine="sglang",
    title="EAGLE at page > 1: an unaligned kv_allocated_len, said to strand the tail page",
    issue="https://github.com/sgl-project/sglang/issues/13741",
    fix="https://github.com/sgl-project/sglang/pull/31616",
    bug_class="leak",
    affected="0.5.13",
    fixed="0.5.13+fix",
    trigger="spec v2 decode at page 4: prepare_for_decode's unaligned over-allocation, then release_kv_cache",
)

PAGE, PAGES, ROWS, WIDTH, STEPS = 4, 256, 8, 512, 40


def run(release: str) -> dict[str, Any]:
    from rigs.bugs.sglang.flows import idle
    from rigs.sglang.driver import Driver
    from rigs.sglang.releases import Check
    from rigs.sglang.spec import paged_pools, prefilled, spec_step
    from rigs.sglang.spec import release as release_kv
    from rigs.timeline import Timeline

    timeline = Timeline()
    d = Driver(BUG.base(release), timeline=timeline)
    d.new("null", kv=PAGES * PAGE, rows=ROWS, context=WIDTH, dense="chunk")
    s = d.sched
    paged_pools(s, d.release, pages=PAGES, page=PAGE, rows=ROWS, width=WIDTH)
    if d.release.check is Check.CHECKER:
        s._checker()  # SGLang's observer over the paged pools
    rng, running, made, unaligned = random.Random(1), s.running_batch.reqs, 0, 0
    for _ in range(STEPS):
        while not running or (len(running) < ROWS - 1 and rng.random() < 0.5):
            made += 1
            running.append(prefilled(s, d.release, f"r{made}", rng.randrange(5, 60)))
        spec_step(s, d.release, running, rng, aligned=release != BUG.affected)  # the trigger
        unaligned += sum(1 for r in running if r.kv_allocated_len % PAGE)
        s.last_batch = s.running_batch
        d.loop()
        for req in [r for r in running if rng.random() < 0.15]:
            release_kv(s, d.release, req)
            running.remove(req)
    for req in list(running):
        release_kv(s, d.release, req)
        running.remove(req)
    step = d.steps
    s.last_batch = None
    idle(d)
    stranded = PAGES - len(s.token_to_kv_pool_allocator.free_pages)
    if stranded:
        timeline.wrong(step, f"{stranded} pages stay allocated after every request was released")
    detail = {"requests": made, "unaligned_allocations": unaligned, "stranded_pages": stranded}
    return outcome(release, stranded > 0, {**timeline.row(), **detail})
