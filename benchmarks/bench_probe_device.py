"""The probe's census and sample on tensors where SGLang keeps them: on the GPU.

Run: ``python benchmarks/bench_probe_device.py`` on a machine with a GPU (``cuda`` is the default
device; where torch sees none the script says so and skips, so ``scripts/bench`` still runs
everywhere; ``--device cpu`` runs the same code on the CPU, a check of the script).

For each size an emulated unified rank is built and run on the CPU until it holds that many live
requests, then faults are injected (one Mamba slot freed twice while its request lives, the seed
incident; three live KV slots freed), then:

1. the cheap sample and both censuses are timed on the CPU tensors;
2. every tensor of the rank is moved to the device (:func:`poolwatch_emulator.placement`), and
   the same probe code is timed again; device work is synchronised before each clock read;
3. the device censuses must equal the CPU ones, busy and idle (same duplicates, overlaps, missing
   ids), and the cheap sample must not synchronise with the device (PyTorch's sync debug mode
   counts every synchronising call).

It prints a table and, with ``--json PATH``, writes every figure.  Timing goals stay out of the
test suite; this script is how the CUDA figures in docs/benchmarks.md were measured.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from bench_probe import NO_CENSUS, rank_with

from poolwatch.probe.core.reading import Reading
from poolwatch.probe.lifecycle import attach, detach
from poolwatch.probe.sglang.engine import SGLANG
from poolwatch.probe.sglang.kv_census import kv_census
from poolwatch.probe.sglang.mamba_census import mamba_census
from poolwatch.probe.sglang.requests import collect_live
from poolwatch_emulator import ModelShape
from poolwatch_emulator.placement import place_tensors


@dataclass(frozen=True)
class Case:
    """One emulated model: ``kind`` is ``mamba`` (Qwen3-Next-like), ``swa`` or ``paged`` (full
    attention only, 16-token pages)."""

    live: int
    kv_slots: int
    kind: str = "mamba"


CASES = (
    Case(16, 16 * 1024),
    Case(256, 256 * 1024),
    Case(1024, 1024 * 1024),
    Case(256, 4 * 1024 * 1024),
    Case(256, 1024 * 1024, "swa"),
    Case(256, 1024 * 1024, "paged"),
)


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


def build(case: Case) -> Any:
    shape = ModelShape(
        full_kv_tokens=case.kv_slots,
        mamba_slots=3 * case.live + 8 if case.kind == "mamba" else None,
        swa_kv_tokens=case.kv_slots if case.kind == "swa" else None,
        page_size=16 if case.kind == "paged" else 1,
        max_running_requests=case.live,
        context_len=8192,
    )
    return rank_with(case.live, shape)[1]


def inject_faults(rank: Any) -> None:
    """The seed (a live request's Mamba slot freed twice) and three live KV slots freed (on an
    SWA model, two sliding-window pages freed twice)."""
    req = rank.running_batch.reqs[0]
    pool = rank.req_to_token_pool
    if getattr(pool, "mamba_pool", None) is not None:
        pool.mamba_pool.free(req.mamba_pool_idx)
        pool.mamba_pool.free(req.mamba_pool_idx)
    start = len(req.prefix_indices)  # the request's private columns start after its tree prefix
    end = min(start + 3, req.kv_allocated_len)
    slots = pool.req_to_token[req.req_pool_idx, start:end]
    alloc = rank.token_to_kv_pool_allocator
    swa = getattr(alloc, "swa_attn_allocator", None)
    if swa is not None:
        pages = alloc.full_to_swa_index_mapping[slots.to(alloc.full_to_swa_index_mapping.dtype)][:2]
        swa.free(pages.clone())
        swa.free(pages.clone())
    else:
        alloc.free(slots.clone())


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


def pair(case: Case, device: str) -> tuple[Row, Row, dict[str, Any]]:
    import torch

    rank = build(case)
    inject_faults(rank)
    probe = attach(SGLANG, rank, NO_CENSUS, serve=False)
    try:
        on_cpu = measure(rank, probe, "cpu", lambda: None)
        expected = censuses(rank, probe)
        chunk_cpu, chunk_expected = chunk_check(rank, probe, lambda: None)
        moved = place_tensors(rank, device)
        cuda = device.startswith("cuda")
        sync = torch.cuda.synchronize if cuda else (lambda: None)
        on_dev = measure(rank, probe, device, sync)
        got = censuses(rank, probe)
        chunk_dev, chunk_got = chunk_check(rank, probe, sync)
        on_dev.same_as_cpu = got == expected and chunk_got == chunk_expected
        if cuda:
            on_dev.sample_syncs = syncs_during(lambda: probe.sample_now("bench"))
            on_dev.census_syncs = syncs_during(lambda: censuses(rank, probe))
            on_dev.chunk_syncs = chunk_syncs(rank, probe)
        found = {k: _found(v) for k, v in got.items()}
        split = parts(rank, probe, sync) if case.kind == "mamba" else {}
        return (
            on_cpu,
            on_dev,
            {
                **asdict(case),
                "tensors_moved": moved,
                "found": found,
                "parts_us": split,
                "chunk_check_us": {"cpu": chunk_cpu, device: chunk_dev},
                "chunk_check_found": [[t.kind.value, list(t.slots)] for t in chunk_got],
                "chunk_syncs": on_dev.chunk_syncs,
            },
        )
    finally:
        detach(rank)


def _found(census: Any) -> dict[str, Any]:
    if census is None:
        return {}
    keys = ("duplicates", "free_and_live", "free_and_tree", "out_of_range", "missing")
    return {k: list(getattr(census, k) or ()) for k in keys}


COLUMNS = (
    "model",
    "live",
    "KV slots",
    "where",
    "sample µs",
    "Mamba busy",
    "Mamba idle",
    "KV busy",
    "KV idle",
    "syncs",
)


def table_line(kind: str, row: Row) -> str:
    cells = (
        kind,
        str(row.live),
        f"{row.kv_slots:,}",
        row.where,
        f"{row.sample_us:.0f}",
        f"{row.mamba_busy_us:.0f}",
        f"{row.mamba_idle_us:.0f}",
        f"{row.kv_busy_us:.0f}",
        f"{row.kv_idle_us:.0f}",
        f"{row.sample_syncs}/{row.census_syncs}" if row.where != "cpu" else "-",
    )
    return " | ".join(f"{c:>10}" for c in cells)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device", default=None, help="torch device to place the rank on (default: cuda, skipped where none)"
    )
    parser.add_argument("--json", default=None, help="write every figure to this file")
    parser.add_argument("--quick", action="store_true", help="the first size only (a check of the script)")
    args = parser.parse_args(argv)
    import torch

    if args.device is None and not torch.cuda.is_available():
        print(
            "skipped: no CUDA device here (--device cpu runs the same code on the CPU, a check of the script)"
        )
        return 0
    args.device = args.device or "cuda"
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(
            f"bench_probe_device: --device {args.device} asked for, but torch sees no CUDA device",
            file=sys.stderr,
        )
        return 2
    if args.device.startswith("cuda"):
        print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    print(" | ".join(f"{c:>10}" for c in COLUMNS))
    rows, details, ok = [], [], True
    for case in CASES[:1] if args.quick else CASES:
        on_cpu, on_dev, detail = pair(case, args.device)
        for row in (on_cpu, on_dev):
            print(table_line(case.kind, row), flush=True)
        rows += [{"kind": case.kind, **asdict(on_cpu)}, {"kind": case.kind, **asdict(on_dev)}]
        details.append(detail)
        ok = ok and on_dev.same_as_cpu and on_dev.sample_syncs == 0
    print(
        "\ncensus on the device equals the CPU census, and the sample never synchronises:",
        "yes" if ok else "NO",
    )
    for d in details:
        found = {pool: {k: v for k, v in d["found"][f"{pool}_idle"].items() if v} for pool in ("mamba", "kv")}
        where = f"{d['kind']} {d['live']} live, {d['kv_slots']:,} KV slots"
        print(f"  {where}: {d['tensors_moved']} tensors moved; found {found}")
        if d["chunk_check_found"]:
            chunk = ", ".join(f"{k} {v:.0f}" for k, v in d["chunk_check_us"].items())
            print(f"    chunk check (µs): {chunk}; found {d['chunk_check_found']}; syncs {d['chunk_syncs']}")
        if d["parts_us"]:
            print(
                "    busy census parts on the device (µs):", {k: round(v) for k, v in d["parts_us"].items()}
            )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"rows": rows, "details": details, "ok": ok}, fh, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
