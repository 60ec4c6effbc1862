"""Flows the SGLang entries share (run in the release's venv).

Engine steps are the driver's loop boundaries; an act between two boundaries belongs to the loop
turn the next boundary closes (:func:`turn`), which is where the probe, sampling before the loop
hook, first sees it.
"""

from __future__ import annotations

import contextlib
from typing import Any

from rigs.sglang.driver import Driver
from rigs.timeline import Timeline

__all__ = [
    "cow_waiting",
    "decoded_then_offloaded",
    "drain",
    "free_ids",
    "guarded",
    "idle",
    "landed",
    "prefilled",
    "turn",
]


def turn(d: Driver) -> int:
    """The engine step of an act done now: the loop turn the next boundary closes."""
    return d.steps + 1


def prefilled(d: Driver, rid: str, ids: list[int], max_new: int) -> Any:
    """A request a PD prefill rank prefilled: its first token sampled there, about to transfer."""
    r = d.arrive(rid, ids, max_new=max_new, vocab_size=1000)
    r.sampling_params.normalize(None)
    r.output_ids.append(5)  # the first token, sampled by the prefill rank
    return r


def landed(d: Driver, r: Any) -> None:
    """The transfer lands (row and KV), and the request is prebuilt into the running batch (a chunk
    cache counts its KV protected; a decode tree takes the prompt)."""
    d.transferred(r)
    d.loop()
    d.prebuilt([r])
    d.loop()


def free_ids(alloc: Any) -> set[int]:
    """Every id on an allocator's free list (its free and its released pages)."""
    return set(alloc.free_pages.tolist()) | set(alloc.release_pages.tolist())


def decoded_then_offloaded(d: Driver, r: Any) -> int:
    """A PD decode request from its transfer to its offload's end: it lands (:func:`landed`) and
    decodes to its end, its KV is copied to host, then the copy completes and the release's own
    offload manager releases it.  The step of that release (the trigger of S12 and S13)."""
    landed(d, r)
    while not d.decode_one(r):
        d.loop()
    d.loop()  # the turn it finished in: its KV is being copied to host
    step = turn(d)
    d.offload_done()
    return step


def cow_waiting(
    release: str, timeline: Timeline, *, priority: bool = False, max_queued: int | None = None
) -> tuple[Driver, Any, int | None]:
    """A Mamba hybrid rank where request ``a`` was served (the tree holds its prompt and a Mamba
    state) and ``b`` runs with a long output budget; ``w``, sharing ``a``'s prompt, waits while
    SGLang's own batch builder matches it -- forking a copy-on-write Mamba slot -- and its
    ``PrefillAdder`` finds no room.  Returns the driver, ``w`` and the COW slot ``w`` holds (``None``
    where the release frees it at the refusal)."""
    d = Driver(release, timeline=timeline)
    d.new(
        "null",
        kv=256,
        mamba=16,
        rows=8,
        context=512,
        server={"max_running_requests": 8, "pp_max_micro_batch_size": 8},
    )
    d.open_admission(priority=priority, max_queued=max_queued)
    a = d.arrive("a", list(range(40)), max_new=2)
    d.admit(a)
    d.finish(a)
    b = d.arrive("b", list(range(1000, 1180)), max_new=200)
    d.admit(b)
    d.loop()
    w = d.arrive("w", [*range(40), 77, 78], max_new=64, **({"priority": 1} if priority else {}))
    d.queue(w)
    d.schedule()  # the real batch builder: the match forks the COW slot, the adder refuses w
    d.loop()
    slot = w.mamba_pool_idx
    return d, w, None if slot is None else int(slot.reshape(-1)[0])


def drain(d: Driver, turns: int = 2) -> None:
    """The loop runs on: the running requests decode for ``turns`` turns (busy: SGLang checks
    nothing), then finish; the next turn finds nothing to do and SGLang's idle check runs
    (recorded on the timeline when it raises)."""
    d.loop()  # the turn the act happened in
    for _ in range(turns):
        d.decode()
        d.loop()
    for req in list(d.sched.running_batch.reqs):
        d.finish(req)
    idle(d)


def idle(d: Driver) -> None:
    """One idle turn of the loop and SGLang's own idle check (it raises on a leak: recorded)."""
    d.loop()
    with contextlib.suppress(ValueError):
        d.strict_check()


def guarded(d: Driver) -> dict[str, Any]:
    """What an entry run with guard on adds to its row: each refusal (pool, slots or pages, the path
    refused) and the pools the probe read at the last boundary (available, evictable, protected,
    held per pool), to be compared with the fixed release's."""
    snap = d.probe.latest
    assert snap is not None, "the probe published nothing"
    refused = [(r.pool.value, r.count, r.hook) for r in snap.repairs if r.kind.value == "refuse"]
    fields = ("size", "available", "evictable", "protected", "held", "session_held")
    pools = {pool.value: {f: getattr(a, f) for f in fields} for pool, a in snap.pools.items()}
    return {"refused": refused, "pools": pools}
