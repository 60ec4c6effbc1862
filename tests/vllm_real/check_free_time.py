"""The free-time check's verdict against a fresh owner count, on one real vLLM release (a property
check over seeded random runs).

Run by ``check_release.py`` (its ``CHECKS``).  The release's own Scheduler, KVCacheManager and
BlockPool run on a pool small enough to preempt, with shared prefixes (prefix caching: several
requests list the same block), admissions, aborts of running and waiting requests and finishes
interleaved at random, and the probe sampled at random moments only (its holder index lags the
lists by a few steps, or by many) or, in two of the runs, at every step's hooks as in EngineCore.
Every list that reaches the probe's free-time check -- each of vLLM's own frees, and the frees the
run asks about -- is judged twice:

* by the probe (``free_findings`` as the probe calls it: its incremental holder index, announced by
  the pops, read again for an unannounced free);
* by a recount from scratch at that moment: every block's owners are its occurrences in the lists
  of the requests the scheduler knows (the full-attention managers' ``req_to_blocks``, as the census
  counts them) plus the owners beside the lists (deferred frees, copy-on-write pairs, pins); a free
  is doomed for a block (distinct, the null block aside) freed ``n`` times when
  ``ref_cnt - n < owners``.

The two sets of doomed block ids must be equal at every free.  The frees the run asks about are
judged without being made (the probe's hook is called with the list; vLLM's pool is not touched):
a running request's list or a slice of it (premature), a stale copy of a request's list just
freed by vLLM (a double free; its shared blocks still listed by another request), random blocks
of the pool (free ones at ``ref_cnt`` 0 among them), a list naming one block twice.  Sound frees
nobody announced are made for real: blocks given an extra reference (as a connector pins them) and
later freed with no pop before them.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.reading import Reading
from poolwatch.probe.lifecycle import detach
from poolwatch.probe.vllm import extras
from poolwatch.probe.vllm.holders import append_only
from poolwatch.probe.vllm.pool_terms import managers, side_owners
from rigs.checks import report
from tests.vllm_real.faults import feed, started

__all__ = ["CHECKS"]

# only the run's own samples: the index lags the lists between them (never a walk to rebuild it)
QUIET = ProbeConfig(serve=False, sample_interval_s=1e12, kv_census_interval_s=1e12, idle_kv_census_gap_s=1e12)
# ... or a sample at every step's hooks (the probe's clock moves a second a read), still no walk
HOOKED = ProbeConfig(
    serve=False, sample_interval_s=0.01, kv_census_interval_s=1e12, idle_kv_census_gap_s=1e12
)
SEEDS = {11: QUIET, 12: QUIET, 13: QUIET, 14: QUIET, 15: HOOKED, 16: HOOKED}


def recount(blocks: Sequence[Any], sched: Any, shape: Any, mgrs: tuple[Any, ...]) -> set[int]:
    """The blocks this free would leave with fewer references than owners, counted from scratch."""
    pool = sched.kv_cache_manager.block_pool
    owners: Counter[int] = Counter()
    for mgr in mgrs:
        if getattr(mgr, "block_pool", None) is not pool or not append_only(mgr):
            continue
        for rid, listed in mgr.req_to_blocks.items():
            if rid in sched.requests:  # a list no known request has owns nothing (a leak's)
                owners.update(b.block_id for b in listed if not b.is_null)
    owners.update(side_owners(sched, shape, mgrs))
    times = Counter(map(id, blocks))
    distinct = {id(b): b for b in blocks if not b.is_null}
    return {b.block_id for k, b in distinct.items() if b.ref_cnt - times[k] < owners[b.block_id]}


class Judged:
    """Every free the probe judged in a run, with the recount's verdict beside its own."""

    def __init__(self, probe: Any) -> None:
        self.probe = probe
        self.frees = 0
        self.doomed = 0  # frees the recount calls doomed
        self.unjudged = 0  # frees the probe judged without its index (not trusted yet)
        self.announced = 0  # frees every block of which a pop announced
        self.differ: list[dict[str, Any]] = []
        self._real = extras.free_findings

    def __call__(self, blocks: Sequence[Any], index: Any = None, resync: Any = None, side: Any = None) -> Any:
        probe = self.probe
        sched = probe.scheduler
        fresh = recount(blocks, sched, probe.reader.shape, managers(sched, Reading()))
        ids = [b.block_id for b in blocks if not b.is_null]
        announced = index is not None and all(index.expected.get(i, 0) > 0 for i in ids)
        found = self._real(blocks, index, resync, side)
        said = set(found.get("negative_ref", ())) | set(found.get("ref_below_owners", ()))
        self.frees += 1
        self.doomed += bool(fresh)
        self.unjudged += index is None
        self.announced += announced
        if index is not None and said != fresh:
            self.differ.append(
                {
                    "free": self.frees,
                    "ids": ids,
                    "refs": [b.ref_cnt for b in blocks],
                    "probe": sorted(said),
                    "recount": sorted(fresh),
                    "announced": announced,
                }
            )
        return found


def _held(sched: Any) -> dict[str, list[Any]]:
    mgr = sched.kv_cache_manager.coordinator.single_type_managers[0]
    return {rid: [b for b in blocks if not b.is_null] for rid, blocks in mgr.req_to_blocks.items() if blocks}


def _ask(probe: Any, blocks: list[Any]) -> None:
    """The probe's free hook judges ``blocks`` (nothing is freed: guard is off, the pool untouched)."""
    if blocks:
        probe.on_free(blocks)


def _asked(e: Any, probe: Any, rng: random.Random, stale: list[list[Any]]) -> str:
    """One free the run asks about (never made); its kind."""
    sched = e.sched
    held = _held(sched)
    pool = sched.kv_cache_manager.block_pool
    what = rng.randrange(5)
    if what == 0 and held:  # premature: a running request's list, or its first blocks
        blocks = held[rng.choice(sorted(held))]
        _ask(probe, blocks[: rng.randrange(1, len(blocks) + 1)] if rng.random() < 0.5 else list(blocks))
        return "premature"
    if what == 1 and stale:  # a stale copy of a list vLLM freed (its shared blocks listed by another)
        _ask(probe, list(reversed(stale[-1])))
        return "stale_copy"
    if what == 2:  # any blocks of the pool: free ones (ref_cnt 0), shared ones, held ones
        _ask(probe, rng.sample(pool.blocks[1:], rng.randrange(1, 6)))
        return "random_blocks"
    if what == 3 and held:  # one block named twice in one free (#42571)
        blocks = held[rng.choice(sorted(held))]
        _ask(probe, [*blocks, rng.choice(blocks)])
        return "twice"
    if held:  # a shared block's owners: every block some two requests list
        counts = Counter(b.block_id for blocks in held.values() for b in blocks)
        shared = [pool.blocks[i] for i, n in counts.items() if n > 1]
        _ask(probe, shared[: rng.randrange(1, 4)])
        return "shared" if shared else "none"
    return "none"


def randomized_run(seed: int, config: ProbeConfig, steps: int = 260) -> dict[str, Any]:
    rng = random.Random(seed)
    e, probe = started(config, blocks=rng.choice((24, 32, 48)), max_running=rng.choice((8, 16)))
    judged = Judged(probe)
    extras.free_findings = judged
    asked: Counter[str] = Counter()
    pinned: list[Any] = []  # blocks given an extra reference (a connector's), freed later unannounced
    stale: list[list[Any]] = []
    out: dict[str, Any] = {"aborted": 0, "preempted": 0, "samples": 0, "censuses": 0, "pinned": 0}
    try:
        feed(e, rng, 6, prefix=f"s{seed}-a")
        for i in range(steps):
            if rng.random() < 0.35 or len(e.sched.requests) < 10:
                feed(e, rng, rng.randrange(1, 4), prefix=f"s{seed}-{i}-")
            queued = [r.request_id for r in [*e.sched.running, *e.sched.waiting]]
            if queued and rng.random() < 0.12:  # an abort, running or waiting: vLLM frees (announced)
                rid = rng.choice(queued)
                stale.append(list(_held(e.sched).get(rid, [])))
                e.abort([rid])
                out["aborted"] += 1
            if rng.random() < 0.1 and (held := _held(e.sched)):  # a connector pins some blocks
                blocks = held[rng.choice(sorted(held))][: rng.randrange(1, 3)]
                for b in blocks:
                    b.ref_cnt += 1
                pinned.append(blocks)
                out["pinned"] += 1
            if pinned and rng.random() < 0.15:  # ... and lets go: a sound free no pop announced
                e.sched.kv_cache_manager.block_pool.free_blocks(pinned.pop(0))
            for _ in range(rng.randrange(1, 4)):
                e.step()
            out["preempted"] += sum(1 for r in e.sched.waiting if r.status.name == "PREEMPTED")
            if rng.random() < 0.4:
                asked[_asked(e, probe, rng, stale)] += 1
            if rng.random() < 0.25:
                census = rng.random() < 0.15
                probe.sample_now("check", census=census)
                out["samples"] += 1
                out["censuses"] += census
        while pinned:
            e.sched.kv_cache_manager.block_pool.free_blocks(pinned.pop(0))
    finally:
        extras.free_findings = judged._real
        detach(e.sched)
    out |= {
        "frees": judged.frees,
        "doomed": judged.doomed,
        "announced": judged.announced,
        "unjudged": judged.unjudged,
        "asked": dict(asked),
        "differ": judged.differ[:5],
        "differences": len(judged.differ),
    }
    return out


def check_free_time() -> None:
    runs = {seed: randomized_run(seed, config) for seed, config in SEEDS.items()}
    ok = all(r["differences"] == 0 and r["unjudged"] == 0 for r in runs.values())
    covered = all(r["doomed"] > 20 and r["announced"] > 20 and r["aborted"] > 0 for r in runs.values())
    covered = covered and any(r["preempted"] > 0 for r in runs.values())
    asked = ("stale_copy", "shared", "premature", "twice")
    covered = covered and all(r["asked"].get(k, 0) > 0 for k in asked for r in runs.values())
    report("free_check_equals_recount", ok and covered, runs)


CHECKS: list[tuple[str, Callable[[], None]]] = [("free_check_equals_recount", check_free_time)]
