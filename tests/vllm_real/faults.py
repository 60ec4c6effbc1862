"""The flows the real-vLLM checks inject their faults in, shared by the read-only checks
(``check_release.py``: the probe names the blocks) and the guard checks (``check_guard.py``: guard
refuses the wrong part of the call).  Each fault is injected the way it happens in vLLM -- through
the block pool's unchecked ``free_blocks`` or the scheduler's own structures -- and returns what
the probe said around it, whichever mode the probe is in."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from poolwatch.conservation import gap
from poolwatch.model.findings import TripwireKind
from poolwatch.model.rank import Pool
from poolwatch.model.snapshot import Snapshot
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.vllm.extras import VllmProbe
from rigs.vllm.engine import Engine, assert_site

__all__ = [
    "CONFIG",
    "PREFIXES",
    "Clean",
    "Struck",
    "clean_run",
    "double_free",
    "duplicate_in_one_free",
    "feed",
    "held_blocks",
    "named",
    "premature_free",
    "run_until_assert",
    "shared_double_free",
    "started",
]

CONFIG = ProbeConfig(serve=False, sample_interval_s=0.01, kv_census_interval_s=1.0, idle_kv_census_gap_s=1.0)
PREFIXES = [[random.Random(p).randrange(10, 900) for _ in range(48)] for p in range(4)]


def prompt(rng: random.Random) -> list[int]:
    shared = PREFIXES[rng.randrange(len(PREFIXES))][: rng.choice((16, 32, 48))]
    return shared + [rng.randrange(10, 900) for _ in range(rng.randrange(1, 40))]


def started(config: ProbeConfig = CONFIG, **engine: Any) -> tuple[Engine, VllmProbe]:
    e = Engine(**engine)
    return e, e.attach(config)


def feed(e: Engine, rng: random.Random, n: int, prefix: str = "r") -> list[str]:
    rids = [f"{prefix}{i}" for i in range(n)]
    for rid in rids:
        e.add(rid, prompt(rng), rng.randrange(4, 40))
    return rids


def held_blocks(e: Engine, rid: str) -> list[Any]:
    mgr = e.sched.kv_cache_manager.coordinator.single_type_managers[0]
    return [b for b in mgr.req_to_blocks.get(rid, []) if not b.is_null]


def named(snap: Snapshot | None, *kinds: TripwireKind) -> set[int]:
    return {s for t in (snap.tripwires if snap else ()) if t.kind in kinds for s in t.slots}


def run_until_assert(
    e: Engine,
    rng: random.Random,
    steps: int,
    *,
    load: Callable[[Engine, random.Random, int, str], object] = feed,
) -> str | None:
    """Step on, feeding new requests (``load``) so the free queue cycles and every block is handed out
    again; where vLLM's own assertion fired, else None."""
    for i in range(steps):
        if len(e.sched.waiting) < 4:
            load(e, rng, 4, f"load{i}-")
        try:
            e.step()
        except AssertionError as exc:
            return assert_site(exc)
    return None


@dataclass
class Clean:
    """A long clean run: what the probe saw on the way and at the end."""

    steps: int = 0
    samples: int = 0
    aborted: int = 0
    gaps: set[int | None] = field(default_factory=set)
    preempted: set[str] = field(default_factory=set)
    final: Snapshot | None = None


def clean_run(e: Engine, probe: VllmProbe) -> Clean:
    """1,500 steps of prefix hits, chunked prefills and aborts (preemptions too on a small pool),
    then a drain and a final look with a census."""
    rng, out = random.Random(1), Clean()
    feed(e, rng, 24)
    for i in range(1500):
        if i % 7 == 0:
            feed(e, rng, 3, prefix=f"s{i}-")
        if i % 23 == 0 and e.sched.running:
            e.abort([e.sched.running[-1].request_id])
            out.aborted += 1
        e.step()
        out.steps = i + 1
        out.preempted.update(r.request_id for r in e.sched.waiting if r.status.name == "PREEMPTED")
        snap = probe.latest
        if snap is not None and Pool.FULL in snap.pools:
            out.gaps.add(gap(snap.pools[Pool.FULL]))
            out.samples += 1
        if not e.sched.requests:
            break
    while e.sched.requests:
        e.step()
    out.final = probe.sample_now("final", census=True)
    return out


@dataclass
class Struck:
    """One fault, struck: the blocks it concerns and what the probe said around it."""

    ids: set[int]
    seen: dict[str, Any] = field(default_factory=dict)
    blocks: list[Any] = field(default_factory=list)


def double_free(e: Engine, probe: VllmProbe, rng: random.Random) -> Struck:
    """A finished request's blocks freed once by vLLM and again through a stale copy."""
    feed(e, rng, 6)
    e.step()
    victim = e.sched.running[0].request_id
    blocks = held_blocks(e, victim)
    e.abort([victim])  # vLLM frees them once
    e.sched.kv_cache_manager.block_pool.free_blocks(list(reversed(blocks)))  # ... and a stale copy again
    return Struck({b.block_id for b in blocks}, {"at_free": named(probe.latest, TripwireKind.NEGATIVE_REF)})


def shared_double_free(e: Engine, probe: VllmProbe, rng: random.Random) -> Struck:
    """Two requests share a prefix; one's table is freed twice.  The shared blocks drop from 2 to 1
    at the sound free and from 1 to 0 at the double free -- back on the free queue while the other
    request still lists them (vLLM never asserts on it)."""
    shared = PREFIXES[1][:48]  # three full blocks
    for rid in ("a", "b"):
        e.add(rid, shared + [rng.randrange(10, 900) for _ in range(5)], 30)
        e.step()  # b's prefix hit on a's cached blocks
    for _ in range(2):
        e.step()
    stale = held_blocks(e, "a")  # a stale copy of a's table (a connector's, say)
    both = {x.block_id for x in stale} & {x.block_id for x in held_blocks(e, "b")}
    e.abort(["a"])  # the sound free
    sound = named(probe.latest, TripwireKind.REF_BELOW_OWNERS)
    e.sched.kv_cache_manager.block_pool.free_blocks(list(reversed(stale)))  # the double free
    at_free = named(probe.latest, TripwireKind.REF_BELOW_OWNERS)
    refs = sorted(x.ref_cnt for x in stale if x.block_id in both)
    seen = {"shared": both, "sound": sound, "at_free": at_free, "shared_refs": refs}
    return Struck({x.block_id for x in stale}, seen, stale)


def duplicate_in_one_free(e: Engine, probe: VllmProbe, rng: random.Random) -> Struck:
    """vLLM #42571: one block listed twice in the list that is freed."""
    feed(e, rng, 6)
    e.step()
    victim = e.sched.running[0].request_id
    mgr = e.sched.kv_cache_manager.coordinator.single_type_managers[0]
    dup = held_blocks(e, victim)[-1]
    mgr.req_to_blocks[victim].append(dup)
    e.step()  # the walk at this boundary names it first (a DoubleFree page until the free)
    before = named(probe.latest, TripwireKind.REF_BELOW_OWNERS)
    kinds = [t.kind.value for t in (probe.latest.tripwires if probe.latest else ())]
    e.abort([victim])
    at_free = named(probe.latest, TripwireKind.REF_BELOW_OWNERS, TripwireKind.NEGATIVE_REF)
    return Struck({dup.block_id}, {"before": before, "kinds_before": kinds, "at_free": at_free}, [dup])


def premature_free(e: Engine, probe: VllmProbe, rng: random.Random) -> Struck:
    """A running request's blocks returned to the pool while it still runs."""
    feed(e, rng, 6)
    e.step()
    victim = e.sched.running[0].request_id
    blocks = held_blocks(e, victim)
    e.sched.kv_cache_manager.block_pool.free_blocks(list(reversed(blocks)))
    at_free = named(probe.latest, TripwireKind.REF_BELOW_OWNERS)  # before any allocation hands one out
    return Struck({b.block_id for b in blocks}, {"at_free": at_free, "victim": victim}, blocks)


Fault = Callable[[Engine, VllmProbe, random.Random], Struck]
