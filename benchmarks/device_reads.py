"""What ``bench_probe_device.py`` times and counts on one rank, wherever its tensors are: the cheap
sample and both censuses (µs, the lower quartile, device work synchronised before each clock
read), the check run after every prefill chunk, where a busy census's time goes, and how many
synchronising CUDA calls each makes (PyTorch's sync debug mode).
"""

from __future__ import annotations

import contextlib
import statistics
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from poolwatch.probe.core.reading import Reading
from poolwatch.probe.sglang.kv_census import kv_census
from poolwatch.probe.sglang.mamba_census import mamba_census
from poolwatch.probe.sglang.requests import collect_live


@dataclass
class Row:
    live: int
    kv_slots: int
    where: str
    sample_us: float
    mamba_busy_us: float
    mamba_idle_us: float
    kv_busy_us: float
    kv_idle_us: float
    sample_syncs: int = 0
    census_syncs: int = 0
    chunk_syncs: int = 0
    same_as_cpu: bool = True


def timed(fn: Callable[[], object], repeat: int, sync: Callable[[], None]) -> float:
    """Microseconds of ``fn``, the lower quartile of ``repeat`` runs, device work included."""
    samples = []
    for _ in range(repeat):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        samples.append(time.perf_counter() - t0)
    return statistics.quantiles(samples, n=4)[0] * 1e6


def censuses(rank: Any, probe: Any) -> dict[str, Any]:
    reading = Reading()
    live = collect_live(rank, reading, "null")
    return {
        f"{name}_{mode}": fn(rank, probe.shape, reading, live, idle=mode == "idle")
        for name, fn in (("mamba", mamba_census), ("kv", kv_census))
        for mode in ("busy", "idle")
    }


def measure(rank: Any, probe: Any, where: str, sync: Callable[[], None]) -> Row:
    reading = Reading()
    live = collect_live(rank, reading, "null")
    runs = {}
    for name, fn in (("mamba", mamba_census), ("kv", kv_census)):
        for mode, repeat in (("busy", 20), ("idle", 10)):
            call = lambda fn=fn, mode=mode: fn(rank, probe.shape, reading, live, idle=mode == "idle")  # noqa: E731
            runs[f"{name}_{mode}"] = timed(call, repeat, sync)
    return Row(
        live=len(live.holders),
        kv_slots=int(rank.token_to_kv_pool_allocator.size),
        where=where,
        sample_us=timed(lambda: probe.sample_now("bench"), 200, sync),
        mamba_busy_us=runs["mamba_busy"],
        mamba_idle_us=runs["mamba_idle"],
        kv_busy_us=runs["kv_busy"],
        kv_idle_us=runs["kv_idle"],
    )


@contextlib.contextmanager
def first_request_chunked(rank: Any) -> Iterator[None]:
    """The first live request stands in for the chunked one (what ``process_prefill_chunk``
    leaves in ``chunked_req`` between two chunks)."""
    before = rank.chunked_req
    rank.chunked_req = rank.running_batch.reqs[0]
    try:
        yield
    finally:
        rank.chunked_req = before


def chunk_check(rank: Any, probe: Any, sync: Callable[[], None]) -> tuple[float, tuple[Any, ...]]:
    """The check run after every ``process_prefill_chunk`` (the seed's direct tripwire):
    (µs, what it found)."""
    from poolwatch.probe.sglang.tripwires import chunk_tripwires

    call = lambda: chunk_tripwires(rank, probe.shape, Reading(), 1, "bench")  # noqa: E731
    with first_request_chunked(rank):
        return timed(call, 50, sync), call()


def chunk_syncs(rank: Any, probe: Any) -> int:
    from poolwatch.probe.sglang.tripwires import chunk_tripwires

    with first_request_chunked(rank):
        return syncs_during(lambda: chunk_tripwires(rank, probe.shape, Reading(), 1, "bench"))


def parts(rank: Any, probe: Any, sync: Callable[[], None]) -> dict[str, float]:
    """Where a busy census's time goes: each read on its own (µs, lower quartile)."""
    from poolwatch.probe.sglang.kv_census import _live_tokens
    from poolwatch.probe.sglang.mamba_census import _free_and_tree, _live_mamba, mamba_free_list, tree_values

    reading = Reading()
    live = collect_live(rank, reading, "null")
    shape, tree = probe.shape, rank.tree_cache
    free = mamba_free_list(rank, shape, reading)
    reads: dict[str, Callable[[], object]] = {
        "mamba.free_and_tree": lambda: _free_and_tree(
            free, tree_values(tree, "all_mamba_values_flatten", "mamba_value")
        ),
        "mamba.live": lambda: _live_mamba(live, shape),
        "kv.tree": lambda: tree_values(tree, "all_values_flatten", "value"),
        "kv.live": lambda: _live_tokens(rank, shape, 1, live),
        "kv.live.per_slice": lambda: _slices(rank, shape, live),  # the previous approach
    }
    if getattr(rank.req_to_token_pool, "mamba_pool", None) is None:
        reads = {k: v for k, v in reads.items() if k.startswith("kv.")}
    return {name: timed(fn, 20, sync) for name, fn in reads.items()}


def _slices(rank: Any, shape: Any, live: Any) -> list[Any]:
    """The previous KV read: one slice (a kernel launch on a GPU) per live request."""
    import torch

    from poolwatch.probe.sglang.footprint import full_private_range

    table = rank.req_to_token_pool.req_to_token
    spans = [full_private_range(req, shape, 1, live) for req in live.holders]
    return [table[s[0], s[1] : s[2]].to(torch.int64) for s in spans if s is not None and s[2] > s[1]]


def syncs_during(fn: Callable[[], object]) -> int:
    """How many synchronising CUDA calls ``fn`` makes (PyTorch's sync debug mode, as warnings)."""
    import torch

    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn()
        return sum("synchroniz" in str(w.message) for w in caught)
    finally:
        torch.cuda.set_sync_debug_mode(0)
