"""The probe's incremental figures against a from-scratch recomputation, on one real vLLM release.

Run by ``check_release.py`` (its ``CHECKS``).  A randomized run of the release's own Scheduler on a
small pool -- prefix sharing, churn, aborts of running and waiting requests, preemptions, then a
leak that grows -- is sampled every 1-4 steps.  At each sample the probe's incremental read (the
holder index kept across samples, the progress told by each ``schedule`` output) is compared with:

* a fresh reader on the same scheduler at the same moment (a new holder index that reads every
  list): the pool account's ``held``, ``session_held``, free count and size, hence the gap;
* the moves recomputed from what the check saw itself: the requests admitted (running now, not at
  the last sample, by identity), and progress (a request finished or admitted, or a running one
  whose ``num_computed_tokens`` grew).

Nothing is sampled between the check's samples (the rate is set out of reach) but the idle sample
when the last request goes and the second read after a gap's census; the moves of every read since
the check's last sample are taken together, so both sides look at the same stretches of the run.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from poolwatch.conservation import gap
from poolwatch.model.rank import Pool, PoolAccount
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.engine import ReadAsk
from poolwatch.probe.core.reading import Reading
from poolwatch.probe.core.waiting import Moves
from poolwatch.probe.lifecycle import detach
from poolwatch.probe.vllm.reader import VllmReader
from rigs.checks import report
from tests.vllm_real.faults import feed, started

__all__ = ["CHECKS"]

# only the check's own samples (no hook is ever due), and no walk to rebuild the index between them
QUIET = ProbeConfig(serve=False, sample_interval_s=1e12, kv_census_interval_s=1e12, idle_kv_census_gap_s=1e12)
FIGURES = ("size", "held", "session_held")


@dataclass
class Seen:
    """The check's own view at its last sample."""

    running: list[Any] = field(default_factory=list)
    tokens: dict[int, int] = field(default_factory=dict)
    requests: set[str] = field(default_factory=set)


def scratch_moves(sched: Any, seen: Seen) -> tuple[int, bool]:
    """Admitted and progressed since ``seen``, recomputed from the scheduler as it is now."""
    running = list(sched.running)
    admitted = len({id(r) for r in running} - {id(r) for r in seen.running})
    grown = any(r.num_computed_tokens > seen.tokens.get(id(r), r.num_computed_tokens) for r in running)
    finished = bool(seen.requests - set(sched.requests))
    progressed = finished or admitted > 0 or grown
    seen.running = running
    seen.tokens = {id(r): r.num_computed_tokens for r in running}
    seen.requests = set(sched.requests)
    return admitted, progressed


def scratch_account(sched: Any, probe: Any) -> PoolAccount:
    """The pool account a reader that remembers nothing reads now."""
    fresh = VllmReader(sched, QUIET, probe.release, {})
    return fresh.read(Reading(), ReadAsk(exact=True)).pools[Pool.FULL]


def differences(mine: PoolAccount, fresh: PoolAccount) -> dict[str, tuple[Any, Any]]:
    out = {f: (getattr(mine, f), getattr(fresh, f)) for f in FIGURES if getattr(mine, f) != getattr(fresh, f)}
    free = (mine.available or 0) + (mine.evictable or 0), (fresh.available or 0) + (fresh.evictable or 0)
    return out | ({"free": free} if free[0] != free[1] else {})


def randomized_run(seed: int, steps: int = 320) -> dict[str, Any]:
    """One run; what differed (empty lists: nothing) and how much of each case it went through."""
    rng = random.Random(seed)
    e, probe = started(QUIET, blocks=rng.choice((48, 64, 96)))
    told: list[Moves] = []  # every read's moves since the check's last sample
    read = probe.reader.waits.moves.read
    probe.reader.waits.moves.read = lambda queues: told.append(read(queues)) or told[-1]
    told.clear()  # (attach's idle read: the baseline, nothing running)
    seen = Seen()  # as at attach: nothing running, nothing known
    out: dict[str, Any] = {"figures": [], "moves": [], "samples": 0, "admitted": 0, "aborted": 0}
    out |= {"preempted": 0, "leaked": 0}
    feed(e, rng, 8, prefix=f"s{seed}-a")
    for i in range(steps):
        if rng.random() < 0.3 or len(e.sched.requests) < 4:
            feed(e, rng, rng.randrange(1, 4), prefix=f"s{seed}-{i}-")
        known = [r.request_id for r in [*e.sched.running, *e.sched.waiting] if r.request_id in seen.requests]
        if known and rng.random() < 0.08:  # an abort of a request the last sample saw
            e.abort([rng.choice(known)])
            out["aborted"] += 1
        pool = e.sched.kv_cache_manager.block_pool
        if i > steps // 2 and rng.random() < 0.3 and pool.get_num_free_blocks() > 8:
            pool.get_new_blocks(1)  # the leak: a block taken, listed by no request
            out["leaked"] += 1
        for _ in range(rng.randrange(1, 5)):
            e.step()
        out["preempted"] += sum(1 for r in e.sched.waiting if r.status.name == "PREEMPTED")
        admitted, progressed = scratch_moves(e.sched, seen)
        mark = len(told)
        snap = probe.sample_now("check")
        reads, told[:] = told[:], []
        if snap is None or not reads or mark == len(reads):
            out["figures"].append({"step": i, "sampled": False})
            continue
        out["samples"] += 1
        out["admitted"] += admitted
        diff = differences(snap.pools[Pool.FULL], scratch_account(e.sched, probe))
        if diff:
            out["figures"].append({"step": i, **diff})
        probed = (sum(m.admitted for m in reads), any(m.progressed for m in reads))
        if probed != (admitted, progressed):
            out["moves"].append({"step": i, "probe": probed, "scratch": (admitted, progressed)})
    out["told"] = probe.reader.waits.moves.told
    out["gap"] = gap(snap.pools[Pool.FULL]) if snap is not None else None
    detach(e.sched)
    return out


def check_incremental() -> None:
    runs = {seed: randomized_run(seed) for seed in (1, 2, 3)}
    ok = all(not r["figures"] and not r["moves"] and r["told"] and r["samples"] > 50 for r in runs.values())
    ok = (
        ok
        and all(r[k] > 0 for r in runs.values() for k in ("aborted", "admitted", "leaked"))
        and any(r["preempted"] > 0 for r in runs.values())
    )
    report("incremental_equals_scratch", ok, runs)


CHECKS: list[tuple[str, Callable[[], None]]] = [("incremental_equals_scratch", check_incremental)]
