"""The ledger's incremental holdings equal a from-scratch recomputation by the per-request rule.

Two randomized runs: the emulator's ranks (unified and PD, aborts, chunked prefill, requests
joining, moving and leaving) on the families it emulates, and hand-made requests of every release
family moved the way SGLang moves them (admitted, grown, chunked, finished in place, retracted:
row cleared and prefix reset, KV freed, ``req.kv`` released or replaced, ping-pong marks flipped
in place, the chunked request's fill grown) -- checked after every move, on pages of 1 and 4 slots.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest
import torch
from tests.probe.sglang.setups import BUSY

from poolwatch.probe.core.reading import Reading
from poolwatch.probe.sglang.footprint import _one
from poolwatch.probe.sglang.ledger import Ledger
from poolwatch.probe.sglang.requests import LiveSet, collect_live
from poolwatch.probe.sglang.shapes import SHAPES, HeldRule, Shape, shape_for_version
from poolwatch_emulator.build import ModelShape
from poolwatch_emulator.cluster import Cluster
from poolwatch_emulator.cluster_config import ClusterConfig


def scratch(live: LiveSet, shape: Shape, page: int) -> tuple[int, int, int]:
    """The per-request rule over every holder: what a sample without the ledger finds."""
    each = [_one(req, shape, page, live) for req in live.holders]
    return sum(t[0] for t in each), sum(t[1] for t in each), sum(t[2] for t in each)


def kept(ledger: Ledger, live: LiveSet, shape: Shape, page: int) -> tuple[int, int, int]:
    return ledger.totals(live.holders, live.chunked, shape, page, lambda r: _one(r, shape, page, live))


@pytest.mark.parametrize(
    ("version", "roles", "seed"),
    [
        ("0.5.4.post1", {"unified": 1, "prefill": 0, "decode": 0}, 1),
        ("0.5.9", {"unified": 1, "prefill": 0, "decode": 0}, 2),
        ("0.5.12", {"unified": 0, "prefill": 1, "decode": 1}, 3),
        ("0.5.4.post1", {"unified": 0, "prefill": 1, "decode": 1}, 4),
    ],
)
def test_the_emulators_ranks_kept_holdings_equal_a_recomputation_at_every_step(
    version: str, roles: dict[str, int], seed: int
) -> None:
    shape = shape_for_version(version)
    model = ModelShape(full_kv_tokens=3072, mamba_slots=48, max_running_requests=12, context_len=2048)
    config = ClusterConfig(
        version=version, shape=model, workload=BUSY, chunked_prefill_size=128, seed=seed, **roles
    )
    cluster = Cluster(replace(config, idle_check_strict=False))
    ledgers = {id(s): Ledger() for s in cluster.schedulers}
    read = 0
    for _ in range(200):
        cluster.step()
        for sched in cluster.schedulers:
            role = str(getattr(sched.disaggregation_mode, "value", "null"))
            live = collect_live(sched, Reading(), role, shape=shape)
            assert kept(ledgers[id(sched)], live, shape, 1) == scratch(live, shape, 1)
            read += len(live.holders)
    recomputed = sum(ledger.recomputed for ledger in ledgers.values())
    assert read > 500
    assert recomputed < read / 2  # most requests kept from one step to the next, not recomputed


class Record:
    """A ``req.kv`` record (0.5.17's lengths; 0.5.23's whole account)."""

    def __init__(self, rng: random.Random, allocated: int, protected: int, ping_pong: bool) -> None:
        self.kv_allocated_len, self.cache_protected_len = allocated, protected
        self.holds_kv, self.holds_mamba = True, rng.random() < 0.8
        self.mamba_pool_idx = torch.tensor([rng.randrange(1, 64)])
        self.mamba_ping_pong_track_buffer = torch.tensor([3, 4]) if ping_pong else None
        self.mamba_ping_pong_empty = [False, True] if ping_pong else None
        self.req_pool_idx = 0


class Req:
    """A live request carrying every family's fields (each family's rule reads its own)."""

    def __init__(self, rng: random.Random, rid: int) -> None:
        self.rid, self.finished_reason = f"r{rid}", None
        self.origin_input_ids = [1] * rng.randrange(4, 40)
        self.output_ids: list[int] = []
        self.fill_ids = list(self.origin_input_ids)
        self.req_pool_idx: int | None = rng.randrange(1, 64)
        self.mamba_pool_idx: torch.Tensor | None = torch.tensor([rng.randrange(1, 64)])
        self.prefix_indices = torch.arange(rng.randrange(0, 4))
        self.cache_protected_len = len(self.prefix_indices)
        self.kv_allocated_len = len(self.origin_input_ids)
        self.kv_committed_freed = False
        self.mamba_ping_pong_track_buffer = torch.tensor([5, 6]) if rng.random() < 0.3 else None
        self.kv: Record | None = Record(
            rng, self.kv_allocated_len, self.cache_protected_len, rng.random() < 0.3
        )

    def finished(self) -> bool:
        return self.finished_reason is not None


def move(rng: random.Random, reqs: list[Req], made: list[int], kv_kept: bool) -> Any:
    """One of SGLang's moves of a live request (fields reassigned; lengths and marks in place);
    ``kv_kept``: a request's ``req.kv`` record is never ``None`` (0.5.23)."""
    if len(reqs) < 12 or rng.random() < 0.1:
        made[0] += 1
        reqs.append(Req(rng, made[0]))
        return None
    req = rng.choice(reqs)
    kind = rng.randrange(9)
    if kind == 0:  # finished in place; left in the batch until filtered
        req.finished_reason = "length"
    elif kind == 1:  # retracted: row cleared, prefix reset, KV freed
        req.req_pool_idx, req.prefix_indices, req.kv_committed_freed = None, torch.arange(0), True
        if req.kv is not None:
            req.kv.holds_kv = False
    elif kind == 2:  # re-admitted with a new prefix match
        req.req_pool_idx, req.prefix_indices = rng.randrange(1, 64), torch.arange(rng.randrange(0, 6))
        req.cache_protected_len, req.kv_committed_freed = len(req.prefix_indices), False
    elif kind == 3:  # released: req.kv gone (0.5.17), or a new record (0.5.23)
        req.kv = (
            None
            if not kv_kept and rng.random() < 0.5
            else Record(rng, req.kv_allocated_len, 0, rng.random() < 0.2)
        )
    elif kind == 4 and req.kv is not None and req.kv.mamba_ping_pong_empty is not None:
        req.kv.mamba_ping_pong_empty[rng.randrange(2)] ^= True  # a track slot taken or let go in place
    elif kind == 5:  # the Mamba slot freed or moved
        req.mamba_pool_idx = None if rng.random() < 0.5 else torch.tensor([rng.randrange(1, 64)])
    elif kind == 6:
        reqs.remove(req)
    elif kind == 7:  # the chunked request: its chunk grows its fill
        req.fill_ids = req.fill_ids + [2] * rng.randrange(1, 9)
        return req
    else:
        req.cache_protected_len = req.cache_protected_len + rng.randrange(1, 4)  # the tree took more
    return None


def decode(reqs: list[Req]) -> None:
    for req in reqs:
        req.output_ids.append(7)
        req.kv_allocated_len += 1
        if req.kv is not None:
            req.kv.kv_allocated_len += 1


FAMILIES = {s.held_rule: s for s in reversed(SHAPES)}  # one shape per rule (the earliest)


@pytest.mark.parametrize("page", [1, 4])
@pytest.mark.parametrize("rule", list(HeldRule))
def test_every_familys_kept_holdings_equal_a_recomputation_through_random_moves(
    rule: HeldRule, page: int
) -> None:
    for shape in {FAMILIES[rule], replace(FAMILIES[rule], has_ping_pong=True)}:
        rng, reqs, made, ledger = random.Random(f"{rule.value}-{page}"), [], [0], Ledger()
        chunked: Any = None
        read = 0
        for step in range(400):
            for _ in range(rng.randrange(0, 4)):
                chunked = move(rng, reqs, made, rule is HeldRule.REQ_KV) or (
                    chunked if chunked in reqs else None
                )
            if step % 3:
                decode(reqs)
            live = LiveSet(tuple(reqs), (), chunked, chunk_ran=rng.random() < 0.7)
            assert kept(ledger, live, shape, page) == scratch(live, shape, page), (rule, step)
            read += len(reqs)
        assert ledger.recomputed < read / 2  # the moved and volatile requests, not every one each step
