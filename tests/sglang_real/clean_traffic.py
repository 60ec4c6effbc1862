"""The clean runs' traffic and turns (:mod:`tests.sglang_real.check_clean`): the requests arriving
at a rank, a prefill and a decode turn, a run drained to idle with SGLang's own idle check, and the
two workloads drawn on a rank alone (``clean_hybrid``, ``clean_pd_prefill``).  The other workloads
(``check_clean_decode``, ``check_clean_hicache``, ``check_clean_spec``) build on these; the
dispatcher in ``check_clean`` imports them all, and none imports it back.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from rigs.sglang.driver import Driver
from rigs.timeline import Timeline

STEPS = 2000
SECONDS_PER_STEP = 0.5  # a loop turn's wall time: 2,000 turns are 1,000 s of the detector's clock
MAX_RUNNING = 8
CHUNK = 16  # a prompt longer than this is prefilled in chunks of it
PREFIXES = [[random.Random(p).randrange(10, 900) for _ in range(48)] for p in range(4)]


class Traffic:
    """The requests arriving at a rank: shared prefixes, some long enough to chunk."""

    def __init__(self, d: Driver, prefixes: list[list[int]] = PREFIXES) -> None:
        self.d, self.rng, self.arrived, self.aborted, self.retracted = d, random.Random(7), 0, 0, 0
        self.prefixes = prefixes

    def arrive(self) -> Any:
        rng = self.rng
        shared = self.prefixes[rng.randrange(len(self.prefixes))][: rng.choice((8, 16, 32, 48))]
        ids = shared + [rng.randrange(10, 900) for _ in range(rng.randrange(1, 24))]
        self.arrived += 1
        return self.d.arrive(f"r{self.arrived}", ids, max_new=rng.randrange(2, 24))

    def figures(self) -> dict[str, int]:
        return {"arrived": self.arrived, "aborted": self.aborted, "retracted": self.retracted}


def guarded(version: str) -> bool:
    """Guard is on where the release's free paths are guarded: a healthy free it refused would be
    a finding (0 refusals on clean runs)."""
    from poolwatch.probe.sglang.shapes import shape_for_version

    return shape_for_version(version).guarded


def started(version: str, mode: str, **rank: Any) -> tuple[Driver, Timeline]:
    """A rank of ``version`` in ``mode`` with the probe attached as deployed, on the engine's clock
    (``rank``: :meth:`Driver.new`'s sizes and options)."""
    timeline = Timeline(seconds_per_step=SECONDS_PER_STEP)
    d = Driver(version, timeline=timeline)
    d.new(mode, guard=guarded(version), **rank)
    d.engine_clock()
    return d, timeline


def prefill_turn(d: Driver) -> Any:
    """A prefill turn in the scheduler's order: the chunked request's boundary and next chunk, or
    the next waiting request (a long one chunked).  The request whose prompt is done now, or None
    (a chunk of it still to come; a prompt whose prefix the tree held may be done in one chunk)."""
    s = d.sched
    if s.chunked_req is not None:
        req = s.chunked_req
        d.chunk_boundary()
    else:
        req = s.waiting_queue.pop(0)
    long = len(req.origin_input_ids) > 2 * CHUNK or req is s.chunked_req
    batch = d.prefill([req], chunk=CHUNK if long else None)
    if s.chunked_req is req:
        return None
    d.prefill_done(batch)
    return req


def decode_turn(d: Driver) -> None:
    """A decode turn: a token for every running request, the ones at their length released."""
    d.decode()
    for req in [
        r for r in d.sched.running_batch.reqs if len(r.output_ids) >= r.sampling_params.max_new_tokens
    ]:
        d.finish(req)


def retracts(version: str) -> bool:
    """Whether a retracted request runs again on the release's Mamba rank.  Up to 0.5.6 (the rows'
    ``alloc(n, reqs)`` API) the tree frees a retracted request's row by index and
    ``reset_for_retract`` leaves the index set, so its tree's copy-on-write match asserts that the
    re-admitted request has none (``assert req.req_pool_idx is None``); from 0.5.9 the row's
    ``free(req)`` clears it."""
    from rigs.sglang.releases import release

    return not release(version).legacy


def as_is(d: Driver) -> None:
    """A turn that starts with nothing of its own (no HiCache events to check)."""


def hybrid(version: str) -> tuple[Timeline, dict[str, Any]]:
    d, timeline = started(version, "null", kv=2048, mamba=48, rows=32, context=512)
    traffic = Traffic(d)
    busy(d, traffic, retract=retracts(version))
    return drained(d, timeline, traffic)


def busy(d: Driver, traffic: Traffic, *, retract: bool, turn_start: Callable[[Driver], None] = as_is) -> None:
    """:data:`STEPS` busy loop turns: an arrival every third, a prefill turn (the chunked request's
    next chunk, or a waiting request while fewer than :data:`MAX_RUNNING` run) or a decode turn,
    the last running request aborted every 23 turns and (``retract``) the first retracted every 41;
    ``turn_start``: what the scheduler does first in each turn (HiCache's events)."""
    s = d.sched
    for turn in range(STEPS):
        if turn % 3 == 0:
            s.waiting_queue.append(traffic.arrive())
        turn_start(d)
        running = s.running_batch.reqs
        if s.chunked_req is not None or (s.waiting_queue and len(running) < MAX_RUNNING):
            prefill_turn(d)
        elif running:
            decode_turn(d)
        if turn % 23 == 11 and len(running) > 1:
            d.finish(running[-1], abort=True)
            traffic.aborted += 1
        if turn % 41 == 20 and len(running) > 1 and retract:
            d.retract(running[0])
            traffic.retracted += 1
        d.loop()


def pd_prefill(version: str) -> tuple[Timeline, dict[str, Any]]:
    d, timeline = started(version, "prefill", kv=2048, mamba=48, rows=32, context=512)
    s, traffic = d.sched, Traffic(d)
    for turn in range(STEPS):
        if turn % 2 == 0:
            s.waiting_queue.append(traffic.arrive())
        done = prefill_turn(d) if s.chunked_req is not None or s.waiting_queue else None
        if done is None:
            d.loop()
            continue
        s.running_batch.reqs.remove(done)  # a prefill rank runs no decode: the prompt's KV is sent
        d.send(done)  # (one loop turn on the inflight queue, then the release)
    return drained(d, timeline, traffic, sends=True)


class Unsupported(Exception):
    """The rig cannot drive the workload on this release (said, with the reason, as skipped)."""


def drained(
    d: Driver,
    timeline: Timeline,
    traffic: Traffic,
    *,
    sends: bool = False,
    turn_start: Callable[[Driver], None] = as_is,
) -> tuple[Timeline, dict[str, Any]]:
    """Every request finished, admitted as in :func:`busy` (``sends``: a prefill rank's, sent;
    ``turn_start``: as for :func:`busy`), the rank idle a few turns, SGLang's own idle check run."""
    s = d.sched
    while s.chunked_req is not None or s.waiting_queue or s.running_batch.reqs:
        turn_start(d)
        if s.chunked_req is not None or (s.waiting_queue and len(s.running_batch.reqs) < MAX_RUNNING):
            done = prefill_turn(d)
            if done is not None and sends:
                s.running_batch.reqs.remove(done)
                d.send(done)
                continue
        else:
            decode_turn(d)
        d.loop()
    s.last_batch = None
    for _ in range(3):
        turn_start(d)
        d.loop()
    figures = {"turns": d.steps, **traffic.figures(), "guard": guarded(d.release.version)}
    return timeline, {**figures, "sglang_idle_check": idle_check(d)}


def idle_check(d: Driver) -> str:
    """SGLang's own strict idle check at the end of a run: "passed", or what it raised."""
    try:
        d.strict_check()
    except ValueError as exc:
        return str(exc)[:300]
    return "passed"
