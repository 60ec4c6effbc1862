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

What is timed and counted is ``device_reads.py``'s.  It prints a table and, with ``--json PATH``,
writes every figure.  Timing goals stay out of the test suite; this script is how the CUDA figures
in docs/benchmarks.md were measured.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from typing import Any

from bench_probe import NO_CENSUS, rank_with  # benchmarks/ (this script's directory is on sys.path)
from device_reads import Row, censuses, chunk_check, chunk_syncs, measure, parts, syncs_during

from poolwatch.probe.lifecycle import attach, detach
from poolwatch.probe.sglang.engine import SGLANG
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
