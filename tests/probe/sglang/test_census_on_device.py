"""The censuses on a placed rank: every tensor moved, the same findings, the accelerator's
gathered read of live KV slots equal to the per-request slices it replaces.

No GPU exists where the tests run, so placement goes to the CPU through ``convert`` (a copy, so
a tensor that was missed stays the original object) and the gathered read is checked on the
CPU directly and, for its dispatch, on PyTorch's ``meta`` device (shapes without data).  The
CUDA figures come from ``benchmarks/bench_probe_device.py``.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from collections import deque
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.reading import Reading
from poolwatch.probe.lifecycle import attach, detach
from poolwatch.probe.sglang.engine import SGLANG
from poolwatch.probe.sglang.kv_census import _gather_spans, _live_tokens, kv_census
from poolwatch.probe.sglang.mamba_census import mamba_census
from poolwatch.probe.sglang.requests import collect_live
from poolwatch_emulator import Cluster, ClusterConfig, ModelShape, WorkloadConfig
from poolwatch_emulator.placement import place_tensors

CONFIG = ProbeConfig(serve=False, chunk_tripwire=False, release="0.5.4.post1")


def busy_rank(live: int = 24) -> Any:
    shape = ModelShape(full_kv_tokens=live * 512, mamba_slots=3 * live + 8, max_running_requests=live)
    load = WorkloadConfig(rate=live / 4, prompt_median=200, output_median=4000, abort_fraction=0.0)
    cluster = Cluster(ClusterConfig(prefill=0, decode=0, unified=1, shape=shape, workload=load, seed=5))
    rank = cluster.schedulers[0]
    cluster.run_until(lambda: len(rank.running_batch.reqs) >= live, 20_000)
    return rank


def reachable_tensors(root: object) -> list[torch.Tensor]:
    """Every tensor reachable from ``root`` through emulator objects and containers of any kind
    (tuples and sets too, which placement does not rewrite)."""
    found, seen, stack = [], set(), [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            found.append(obj)
        elif isinstance(obj, (dict, list, tuple, set, frozenset, deque)):
            stack.extend(gc.get_referents(obj))
        elif type(obj).__module__.startswith("poolwatch_emulator") and hasattr(obj, "__dict__"):
            stack.append(vars(obj))
    return found


def censuses(rank: Any) -> tuple[Any, ...]:
    probe = attach(SGLANG, rank, CONFIG, serve=False)
    try:
        reading = Reading()
        live = collect_live(rank, reading, "null")
        return tuple(
            fn(rank, probe.shape, reading, live, idle=idle)
            for fn in (mamba_census, kv_census)
            for idle in (False, True)
        )
    finally:
        detach(rank)


@pytest.mark.slow  # not core: the inner loop skips it, CI runs it
def test_placement_moves_every_tensor_the_rank_can_reach() -> None:
    rank = busy_rank()
    before = len(reachable_tensors(rank))
    copies: list[torch.Tensor] = []
    moved = place_tensors(rank, "cpu", convert=lambda t: copies.append(t.clone()) or copies[-1])
    after = {id(t) for t in reachable_tensors(rank)}
    assert moved == len(copies) > 3 * 24  # free lists, tables, every request's and tree node's tensors
    assert after == {id(t) for t in copies}  # nothing left behind, in a tuple or anywhere
    assert before >= moved


@pytest.mark.slow  # not core: the inner loop skips it, CI runs it
def test_a_placed_rank_gives_the_same_censuses_with_faults_found() -> None:
    rank = busy_rank()
    req = rank.running_batch.reqs[0]
    rank.req_to_token_pool.mamba_pool.free(req.mamba_pool_idx)  # the seed: freed while live
    start = len(req.prefix_indices)
    rank.token_to_kv_pool_allocator.free(
        rank.req_to_token_pool.req_to_token[req.req_pool_idx, start : start + 1].clone()
    )
    expected = censuses(rank)
    place_tensors(rank, "cpu", convert=torch.clone)
    assert censuses(rank) == expected
    mamba_busy, _, kv_busy, _ = expected
    assert mamba_busy is not None
    assert mamba_busy.free_and_live == (int(req.mamba_pool_idx),)
    assert kv_busy is not None
    assert len(kv_busy.free_and_live) == 1


def test_placement_survives_cycles_and_shared_containers() -> None:
    shared = [torch.arange(3)]
    box: dict[str, Any] = {"a": shared, "b": shared}
    box["self"] = box
    assert place_tensors(box, "cpu", convert=torch.clone) == 1


@st.composite
def spans(draw: st.DrawFn) -> tuple[torch.Tensor, list[tuple[int, int, int]]]:
    rows, width = draw(st.integers(1, 12)), draw(st.integers(1, 64))
    table = torch.randint(0, 10_000, (rows, width), dtype=torch.int32)
    out = []
    for _ in range(draw(st.integers(0, 20))):
        row, start = draw(st.integers(0, rows - 1)), draw(st.integers(0, width - 1))
        out.append((row, start, draw(st.integers(start + 1, width))))
    return table, out


@settings(max_examples=60)
@given(spans())
def test_the_gathered_read_equals_one_slice_per_request(
    case: tuple[torch.Tensor, list[tuple[int, int, int]]],
) -> None:
    table, parts = case
    expected = [table[r, a:b].to(torch.int64) for r, a, b in parts]
    got = _gather_spans(table, parts) if parts else torch.empty((0,), dtype=torch.int64)
    assert torch.equal(got, torch.cat(expected) if expected else got)
    assert got.dtype == torch.int64


@pytest.mark.slow  # not core: the inner loop skips it, CI runs it
def test_an_accelerator_table_is_read_with_one_gather_and_a_cpu_table_per_request() -> None:
    rank = busy_rank(8)
    probe = attach(SGLANG, rank, CONFIG, serve=False)
    try:
        reading = Reading()
        live = collect_live(rank, reading, "null")
        on_cpu = _live_tokens(rank, probe.shape, 1, live)
        pool = rank.req_to_token_pool
        pool.req_to_token = pool.req_to_token.to("meta")  # an off-CPU device: shapes, no data
        on_meta = _live_tokens(rank, probe.shape, 1, live)
    finally:
        detach(rank)
    assert len(on_cpu) == len(live.holders) > 1
    assert len(on_meta) == 1
    assert on_meta[0].device.type == "meta"
    assert on_meta[0].shape[0] == sum(int(t.shape[0]) for t in on_cpu)


@pytest.mark.slow  # not core: the inner loop skips it, CI runs it
def test_the_device_benchmark_checks_its_censuses_where_it_runs(tmp_path: Path) -> None:
    """``bench_probe_device.py --device cpu`` runs the CUDA benchmark's whole path (build, fault,
    place, census, compare) on the CPU: the benchmark itself stays working without a GPU."""
    out = tmp_path / "figures.json"
    script = Path(__file__).parents[3] / "benchmarks" / "bench_probe_device.py"
    done = subprocess.run(
        [sys.executable, str(script), "--device", "cpu", "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    figures = json.loads(out.read_text())
    assert figures["ok"] is True
    (detail,) = figures["details"]
    assert detail["found"]["mamba_busy"]["duplicates"]  # the seed's slot, on the free list twice
    assert len(detail["found"]["kv_busy"]["free_and_live"]) == 3
    assert ["free_and_live", detail["found"]["mamba_busy"]["free_and_live"]] in detail["chunk_check_found"]
