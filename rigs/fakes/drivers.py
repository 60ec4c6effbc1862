"""How the engine contract drives each engine: one :class:`Driver` per engine in the registry, plus
the reference toy engine (:mod:`rigs.fakes.toy`).  A driver knows its engine's stand-in scheduler:
how to make a healthy idle one, give it work, run one iteration through its own (hooked) methods,
bring it back to idle, and leak slots while busy -- nothing about the probe."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from poolwatch.engines import ENGINES, EngineEntry, load
from poolwatch.probe.core.engine import Engine
from rigs.fakes.sglang import Rank
from rigs.fakes.sglang import Scheduler as SglangFake
from rigs.fakes.toy.engine import TOY
from rigs.fakes.toy.scheduler import ToyScheduler
from rigs.fakes.vllm import Scheduler as VllmFake

# the reference engine, unless the registry ships one of that name (then the shipped room is driven)
TOY_ENTRY = next(
    (e for e in ENGINES if e.name == TOY.name),
    EngineEntry(TOY.name, "Toy", probe="rigs.fakes.toy.engine:TOY"),
)


@dataclass(frozen=True)
class Driver:
    spec: Engine
    release: str  # the release its stand-in is read as
    cls: type  # the stand-in scheduler class (install wraps a fresh subclass of it)
    new: Callable[[type], Any]  # a healthy, idle scheduler of that class
    work: Callable[[Any, int], None]  # n more units of work, then one iteration
    loop: Callable[[Any], None]  # one iteration through the scheduler's own methods
    finish: Callable[[Any], None]  # all work done, then its idle hook
    leak: Callable[[Any, int], None]  # n more slots held by no one (while busy)


# --- SGLang: the 0.5.4 fakes (a Rank builds the scheduler's state) ------------------------------


def _sglang_new(cls: type) -> Any:
    rank = Rank(kv=256, mamba=16, rows=16)
    sched = cls(rank.alloc, rank.rows, rank.tree, max_total_num_tokens=256)
    rank.sched = sched
    sched.rank_builder = rank
    return sched


def _sglang_work(sched: Any, n: int) -> None:
    rank: Rank = sched.rank_builder
    for _ in range(n):
        rank.running(f"r{len(sched.running_batch.reqs)}", origin=3, outputs=1)
    sched.recv_requests()


def _sglang_finish(sched: Any) -> None:
    rank: Rank = sched.rank_builder
    for req in sched.running_batch.reqs:
        assert req.req_pool_idx is not None
        row = rank.rows.req_to_token[req.req_pool_idx, : len(req.origin_input_ids) + len(req.output_ids) - 1]
        rank.alloc.free(row.to(rank.alloc.free_pages.dtype))
        rank.mamba.free(req.mamba_pool_idx.reshape(1))
        rank.rows.free_slots.append(req.req_pool_idx)
    sched.running_batch.reqs.clear()
    sched.last_batch = None
    sched.recv_requests()
    sched.self_check_during_idle()


def _sglang_leak(sched: Any, n: int) -> None:
    sched.rank_builder.alloc.take(n)  # taken and never returned


SGLANG_DRIVER = Driver(
    spec=load("poolwatch.probe.sglang.engine:SGLANG"),
    release="0.5.4.post1",
    cls=SglangFake,
    new=_sglang_new,
    work=_sglang_work,
    loop=lambda sched: sched.recv_requests(),
    finish=_sglang_finish,
    leak=_sglang_leak,
)


# --- vLLM: the block-pool fakes -----------------------------------------------------------------


def _vllm_work(sched: Any, n: int) -> None:
    for _ in range(n):
        sched.add(f"r{len(sched.requests)}", 2)
    sched.schedule()
    sched.update_from_output()


def _vllm_finish(sched: Any) -> None:
    sched.finish_requests(list(sched.requests))


def _vllm_loop(sched: Any) -> None:
    sched.schedule()
    sched.update_from_output()


VLLM_DRIVER = Driver(
    spec=load("poolwatch.probe.vllm.engine:VLLM"),
    release="0.33.0",
    cls=VllmFake,
    new=lambda cls: cls(256),
    work=_vllm_work,
    loop=_vllm_loop,
    finish=_vllm_finish,
    leak=lambda sched, n: sched.pool.get_new_blocks(n),  # counted, listed by no request
)


# --- the reference toy engine ---------------------------------------------------------------------


def _toy_work(sched: Any, n: int) -> None:
    for _ in range(n):
        sched.submit(f"r{sched.iterations}-{len(sched.waiting)}", 2)
    sched.step()


def _toy_finish(sched: Any) -> None:
    for rid in list(sched.held):
        sched.finish(rid)
    sched.step()
    sched.idle()


def _toy_leak(sched: Any, n: int) -> None:
    sched.free = sched.free[n:]


TOY_DRIVER = Driver(
    spec=load(TOY_ENTRY.probe),
    release="1.0",
    cls=ToyScheduler,
    new=lambda cls: cls(256),
    work=_toy_work,
    loop=lambda sched: sched.step(),
    finish=_toy_finish,
    leak=_toy_leak,
)

DRIVERS = {"sglang": SGLANG_DRIVER, "vllm": VLLM_DRIVER, "toy": TOY_DRIVER}
REGISTRY = tuple(
    e for e in (ENGINES if TOY_ENTRY in ENGINES else (*ENGINES, TOY_ENTRY)) if e.probe
)  # every engine shipped with a probe room, and the reference
