"""Admissions told by the steps' own outputs equal the running lists compared by identity: a
randomized run of admissions, finishes, aborts, preemptions and resumptions (a resumed request in
``scheduled_new_reqs`` as from 0.18, or not as on 0.10.2), request ids reused, reads at random."""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from poolwatch.probe.vllm.engine import vllm_release
from poolwatch.probe.vllm.progress import VllmProgress
from poolwatch.probe.vllm.shapes import shape_of_family


class Status(enum.Enum):
    WAITING = enum.auto()
    RUNNING = enum.auto()
    PREEMPTED = enum.auto()
    FINISHED_STOPPED = enum.auto()
    FINISHED_ABORTED = enum.auto()


@dataclass(eq=False)
class Req:
    request_id: str
    status: Status = Status.WAITING


@dataclass
class New:
    req_id: str


@dataclass
class Output:
    total_num_scheduled_tokens: int
    scheduled_new_reqs: list[New]


@dataclass
class Sched:
    running: list[Any] = field(default_factory=list)
    waiting: list[Any] = field(default_factory=list)
    requests: dict[str, Any] = field(default_factory=dict)
    deferred_waiting: set[Any] = field(default_factory=set)


def _step(
    sched: Sched, progress: VllmProgress, rng: random.Random, names: list[str], resumed_new: bool
) -> None:
    progress.step_preempted.clear()
    entered: list[New] = []
    if sched.running and rng.random() < 0.15:  # a preemption: vLLM pops the list, then marks it
        victim = sched.running.pop(rng.randrange(len(sched.running)))
        progress.popped(victim.request_id)
        victim.status = Status.PREEMPTED
        sched.waiting.append(victim)
    for req in list(sched.waiting):
        if rng.random() < 0.5:
            continue
        sched.waiting.remove(req)
        if rng.random() < 0.1:  # aborted while waiting
            req.status = Status.FINISHED_ABORTED
            sched.requests.pop(req.request_id, None)
            continue
        if req.status is Status.WAITING or resumed_new:
            entered.append(New(req.request_id))
        req.status = Status.RUNNING
        sched.running.append(req)
    for req in [r for r in sched.running if rng.random() < 0.1]:  # finished
        sched.running.remove(req)
        req.status = Status.FINISHED_STOPPED
        sched.requests.pop(req.request_id, None)
    progress.scheduled(Output(len(sched.running), entered))
    for _ in range(rng.randrange(0, 3)):  # new requests (an id now and then one used before)
        rid = rng.choice(names) if names and rng.random() < 0.2 else f"r{len(names)}"
        if rid in sched.requests:
            continue
        names.append(rid)
        sched.requests[rid] = req = Req(rid)
        sched.waiting.append(req)


@pytest.mark.parametrize("resumed_new", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_admissions_from_the_outputs_equal_the_running_lists_compared(seed: int, resumed_new: bool) -> None:
    rng, sched, names = random.Random(seed), Sched(), []
    progress = VllmProgress(sched, shape_of_family(vllm_release("0.34.0").family))
    progress.read({"waiting": 0, "running": 0})
    last: list[Any] = []
    for _ in range(600):
        _step(sched, progress, rng, names, resumed_new)
        if rng.random() < 0.4:
            moves = progress.read({"waiting": len(sched.waiting), "running": len(sched.running)})
            now = list(sched.running)
            assert moves.admitted == len({id(r) for r in now} - {id(r) for r in last})
            last = now
