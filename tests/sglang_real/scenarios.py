"""The probe against SGLang's own checks on a release's real classes: busy and idle flows, chunked
prefill, the seed double free (live on 0.5.4.post1, injected through the release's API elsewhere)
and guard v2's refusal of the split free API (run by ``check_release.py``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from poolwatch.model.findings import TripwireKind
from poolwatch.model.rank import Pool
from rigs.checks import report
from rigs.sglang.driver import Driver, gaps
from rigs.sglang.releases import RowApi
from rigs.timeline import Timeline
from tests.sglang_real.agreement import agrees_at_idle, expect_balanced

__all__ = ["scenarios"]


def busy_then_idle(d: Driver) -> None:
    s = d.new()
    a = d.arrive("a", list(range(12)))
    d.admit(a)
    expect_balanced(d, "prefill of a")
    d.decode()
    expect_balanced(d, "decode of a")
    b = d.arrive("b", [*range(9), 50, 51])  # shares a's first 9 tokens through the tree
    d.admit(b)
    expect_balanced(d, "prefill of b on a's prefix")
    d.decode()
    d.decode()
    expect_balanced(d, "decode of a and b")
    w = d.arrive("w", [*range(12), 60])  # matches a's cached node, which has a Mamba state
    w.init_next_round_input(s.tree_cache)  # considered, not admitted: a copy-on-write Mamba slot (0.5.23
    s.waiting_queue.append(w)  # forks one only at its Mamba chunk size, which a's 12 tokens do not reach)
    cow = "holding a copy-on-write slot" if d.release.cow_at_match else "matched against the tree"
    expect_balanced(d, f"a waiting request {cow}")
    d.finish(a)
    expect_balanced(d, "a finished")
    d.finish(b)
    s.waiting_queue.remove(w)
    if d.release.cow_at_match:
        cow = d.record(w).mamba_pool_idx
        report("the waiting request got a copy-on-write slot", cow is not None)
        if cow is not None:
            d.mamba_free.free(cow.reshape(1))
    s.last_batch = None
    agrees_at_idle(d, "after a and b")
    before = s.tree_cache.full_evictable_size(), s.tree_cache.mamba_evictable_size()
    d.evict(tokens=5, mamba=1)
    after = s.tree_cache.full_evictable_size(), s.tree_cache.mamba_evictable_size()
    report(
        "eviction freed KV and Mamba slots", after[0] < before[0] and after[1] < before[1], [before, after]
    )
    agrees_at_idle(d, "after evicting")


def chunked(d: Driver) -> None:
    d.new()
    c = d.arrive("c", list(range(100, 130)))
    d.prefill([c], chunk=8)
    expect_balanced(d, "chunk 1 of c")
    d.chunk_boundary()
    d.prefill([c], chunk=8)
    expect_balanced(d, "chunk 2 of c")
    d.chunk_boundary()
    d.prefill_done(d.prefill([c], chunk=64))
    expect_balanced(d, "last chunk of c")
    d.finish(c)
    d.sched.last_batch = None
    agrees_at_idle(d, "after the chunked request")


def seed(d: Driver) -> None:
    """#12432 on a PD prefill rank: SGLang's own process_prefill_chunk frees the chunked request's
    row with the default ``free_mamba_cache=True``, so its Mamba slot goes back on the free list.
    The run is recorded in loop steps (:mod:`rigs.timeline`), as a real-bug entry records it."""
    d.timeline = timeline = Timeline()
    s = d.new("prefill")
    c = d.arrive("c", list(range(200, 230)))
    d.prefill([c], chunk=8)
    slot = int(c.mamba_pool_idx)
    timeline.wrong(d.steps, "process_prefill_chunk frees the chunked request's row with its Mamba slot")
    d.chunk_step()
    snap = d.probe.latest
    wires = [(t.kind, t.pool, t.slots, t.first_seen_hook) for t in snap.tripwires] if snap else []
    report(
        "seed: the tripwire names the chunked request's Mamba slot right after process_prefill_chunk",
        (TripwireKind.FREE_AND_LIVE, Pool.MAMBA, (slot,), "process_prefill_chunk") in wires,
        {"slot": slot, "tripwires": [str(w) for w in wires]},
    )
    d.prefill([c], chunk=8)
    found = gaps(d.boundary())
    report(
        "seed: at the next loop boundary the Mamba pool shows a surplus, the full pool balances",
        found["mamba"] is not None and found["mamba"] < 0 and found["full"] == 0 and found["req"] == 0,
        found,
    )
    d.chunk_step()  # the rest, as the PD prefill loop runs it: the last chunk, the transfer, the release
    d.prefill([c], chunk=64)
    d.send(c)
    s.last_batch = None
    report(
        "seed: SGLang's own idle check finds the leak the probe reported while busy",
        agrees_at_idle(d, "seed at idle"),
    )
    with contextlib.suppress(ValueError):
        d.strict_check()  # as the server runs it: it raises
    d.timeline = None
    row = timeline.row()
    report(
        "seed, in loop steps: the probe names the slot at the wrong act, the page follows within two "
        "steps, SGLang's own check raises later",
        row["steps_to_finding"] == 0
        and row["steps_to_page"] is not None
        and row["steps_to_page"] <= 2
        and row["steps_to_engine"] is not None
        and row["steps_to_engine"] > row["steps_to_page"],
        row,
    )


def injected(d: Driver) -> None:
    """The #12994 shape on a fixed release: the chunked request's slot freed behind its back
    through the release's Mamba free list."""
    d.new("prefill")
    c = d.arrive("c", list(range(200, 230)))
    d.prefill([c], chunk=8)
    d.chunk_boundary()
    held = d.record(c).mamba_pool_idx
    slot = int(held)
    d.mamba_free.free(held.reshape(1))  # the fault
    d.prefill([c], chunk=8)
    snap = d.boundary()
    wires = [(t.kind, t.pool, t.slots) for t in snap.tripwires]
    report(
        "injected double free: the census names the live slot found on the free list",
        (TripwireKind.FREE_AND_LIVE, Pool.MAMBA, (slot,)) in wires,
        [str(w) for w in wires],
    )
    report(
        "injected double free: a Mamba surplus of one while the full pool balances",
        gaps(snap)["mamba"] == -1 and gaps(snap)["full"] == 0,
        gaps(snap),
    )
    d.chunk_boundary()
    d.prefill_done(d.prefill([c], chunk=64))
    d.finish(c)
    d.sched.last_batch = None
    report(
        "injected double free: SGLang's own idle check finds it too",
        agrees_at_idle(d, "injected double free at idle"),
    )


def refuse_request_free(d: Driver) -> None:
    """The split free API (0.5.9 - 0.5.12): ``free_mamba_cache(chunked_req)`` frees the slot and
    clears the request's pointer; guard v2 refuses the call whole, so the request keeps both."""
    for guard in (False, True):
        s = d.new("prefill", guard=guard)
        c = d.arrive("c", list(range(200, 230)))
        d.prefill([c], chunk=8)
        d.chunk_boundary()
        held = c.mamba_pool_idx
        s.req_to_token_pool.free_mamba_cache(c)  # the fault
        free = [int(i) for i in s.req_to_token_pool.mamba_pool.free_slots.tolist()]
        snap = d.boundary()
        detail = {"slot": int(held), "pointer": c.mamba_pool_idx, "gaps": gaps(snap)}
        if not guard:
            report(
                "free_mamba_cache of the live chunked request, guard off: the slot goes back and the "
                "request's pointer is cleared (its state is lost; the books balance)",
                c.mamba_pool_idx is None and int(held) in free and gaps(snap)["mamba"] == 0,
                detail,
            )
            continue
        repairs = [(r.kind.value, r.count, r.hook) for r in snap.repairs]
        report(
            "free_mamba_cache of the live chunked request, guard on: refused whole -- the request keeps "
            "its slot, the slot stays off the free list, one refusal",
            c.mamba_pool_idx is held
            and int(held) not in free
            and repairs == [("refuse", 1, "free_mamba_cache")],
            {**detail, "repairs": repairs},
        )
        d.chunk_boundary()
        d.prefill_done(d.prefill([c], chunk=64))
        d.finish(c)
        s.last_batch = None
        report("guard on: SGLang's own idle check passes afterwards", not agrees_at_idle(d, "refused whole"))


def scenarios(d: Driver) -> list[tuple[str, Callable[[], Any]]]:
    """The scenarios ``d``'s release runs."""
    r = d.release
    out: list[tuple[str, Callable[[], Any]]] = [
        ("busy then idle", lambda: busy_then_idle(d)),
        ("chunked prefill", lambda: chunked(d)),
        ("seed double free", lambda: (seed if r.seed_live else injected)(d)),
    ]
    if r.rows is RowApi.REQUEST and not r.unified_tree:  # free_mamba_cache(req) beside the row free
        out.append(("guard v2 on free_mamba_cache", lambda: refuse_request_free(d)))
    return out
