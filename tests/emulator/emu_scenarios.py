"""Small, fast cluster settings shared by the emulator tests."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from poolwatch_emulator import Cluster, ClusterConfig, ModelShape, WorkloadConfig, parse_fault

MAMBA = ModelShape(full_kv_tokens=16_384, mamba_slots=192, max_running_requests=48, context_len=4096)
PLAIN = ModelShape(full_kv_tokens=16_384, mamba_slots=None, max_running_requests=48, context_len=4096)
PAGED = replace(PLAIN, page_size=16)
HICACHE = replace(PLAIN, host_kv_tokens=32_768)
SWA = ModelShape(
    full_kv_tokens=16_384,
    mamba_slots=None,
    swa_kv_tokens=16_384,
    page_size=4,
    max_running_requests=48,
    context_len=4096,
)

# heavy: chunking (prompts > 256 tokens), retraction (decode outgrows the pool), aborts anywhere
HEAVY = WorkloadConfig(
    rate=8.0,
    prompt_median=400,
    output_median=150,
    abort_fraction=0.2,
    abort_within_s=5.0,
    transfer_latency_s=0.3,
    gap_s=0.0,
)
# waiting requests that hold copy-on-write Mamba slots, aborted while they wait
COW = WorkloadConfig(
    rate=10.0,
    prompt_median=400,
    output_median=200,
    abort_fraction=0.5,
    abort_within_s=120.0,
    followup_fraction=0.8,
    gap_s=0.0,
)
# aborts that land on PD decode requests waiting for their KV
DECODE_ABORTS = replace(HEAVY, abort_fraction=0.3, abort_within_s=3.0, transfer_latency_s=1.0)


def cluster(
    version: str = "0.5.4.post1",
    *,
    pd: bool = True,
    shape: ModelShape = MAMBA,
    workload: WorkloadConfig = HEAVY,
    faults: tuple[str, ...] = (),
    **kw: Any,
) -> Cluster:
    config = ClusterConfig(
        prefill=int(pd),
        decode=int(pd),
        unified=int(not pd),
        version=version,
        shape=shape,
        workload=workload,
        chunked_prefill_size=256,
        faults=tuple(parse_fault(f) for f in faults),
        epoch=1_764_000_000.0,
        **kw,
    )
    return Cluster(config)
