"""A deployment and traffic that give each fault of the catalogue its chance within seconds: the
workers it needs (PD, or unified when it happens on one worker), the release, the model shape, the
features (speculative decoding, HiCache, the decode offload, an encoder cache) and the load.

The demo (``poolwatch demo --fault NAME``), the benchmarks and the tests build their clusters from
:func:`scenario_config`; a caller overrides any :class:`~poolwatch_emulator.cluster_config.
ClusterConfig` field (the seed, the TP size, the log directory, a smaller pool).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from poolwatch_emulator.build import ModelShape
from poolwatch_emulator.cluster_config import ClusterConfig
from poolwatch_emulator.encoder_cache import EncoderCacheConfig
from poolwatch_emulator.faults import parse_fault
from poolwatch_emulator.spec import SpecConfig
from poolwatch_emulator.workload import WorkloadConfig

__all__ = ["SCENARIOS", "Scenario", "scenario_config"]


@dataclass(frozen=True)
class Scenario:
    pd: bool  # one prefill and one decode worker, else one unified worker
    version: str
    shape: ModelShape
    workload: WorkloadConfig
    extras: Mapping[str, Any] = field(default_factory=dict)  # further ClusterConfig fields
    trigger: str = ""  # how the fault is armed unless the caller says (e.g. "@p=1": every chance)


_SMALL = ModelShape(full_kv_tokens=16_384, mamba_slots=None, max_running_requests=48, context_len=4096)
_MAMBA = replace(_SMALL, mamba_slots=192)
_PAGED = replace(_SMALL, page_size=16)
_HICACHE = replace(_SMALL, host_kv_tokens=32_768)
_SWA = replace(_SMALL, swa_kv_tokens=16_384, page_size=4)
_BUSY = WorkloadConfig(rate=6.0, prompt_median=500, output_median=150, gap_s=0.0)
_PRESSURE = replace(_BUSY, rate=10.0, output_median=300)  # decode outgrows the pool: evictions, retraction
_SHARED = replace(_PRESSURE, shared_fraction=0.9, followup_fraction=0.5)  # prefixes the tree keeps
_IMAGES = EncoderCacheConfig(kind="mm", cache_size=200, compute_budget=256)  # room for one image

SCENARIOS: dict[str, Scenario] = {
    # the first classes: as the demo has always run them (a PD cluster, default pools)
    "pd-chunked-mamba-double-free": Scenario(True, "0.5.4.post1", ModelShape(), WorkloadConfig()),
    "mamba-cow-leak-on-abort": Scenario(
        False, "0.5.9", _MAMBA, replace(_PRESSURE, abort_fraction=1.0, abort_within_s=30.0), trigger="@p=1"
    ),
    "full-kv-leak-on-retract": Scenario(False, "0.5.9", _SMALL, _PRESSURE),
    "pd-decode-abort-kv-leak": Scenario(
        True,
        "0.5.12",
        ModelShape(),
        WorkloadConfig(rate=12, abort_fraction=0.3, abort_within_s=5, transfer_latency_s=2.0),
    ),
    "swa-page-overcount": Scenario(False, "0.5.12", _SWA, _BUSY),
    "hicache-host-leak": Scenario(False, "0.5.12", _HICACHE, _BUSY),
    "hicache-host-double-free": Scenario(False, "0.5.12", _HICACHE, _BUSY),
    # speculative decoding (spec v2's over-allocation)
    "spec-stranded-tail-page": Scenario(
        False, "0.5.9", _PAGED, _BUSY, {"speculative": SpecConfig()}, trigger="@p=0.05"
    ),
    "spec-row-clamped-release": Scenario(  # requests that run to the context's end
        False,
        "0.5.9",
        replace(_SMALL, context_len=1024),
        replace(_BUSY, prompt_median=700, output_median=600, output_sigma=0.3),
        {"speculative": SpecConfig(num_steps=5, eagle_topk=2, num_draft_tokens=8)},
        trigger="@p=1",
    ),
    "spec-swa-frontier-off-by-one": Scenario(False, "0.5.12", _SWA, _BUSY, {"speculative": SpecConfig()}),
    # lock imbalance
    "hicache-unlock-without-lock": Scenario(False, "0.5.9", _HICACHE, _SHARED, trigger="@p=0.1"),
    "hicache-write-acks-undrained": Scenario(  # bursts, then long decodes with nothing waiting
        False, "0.5.9", _HICACHE, replace(_BUSY, rate=8.0, output_median=600, burst_s=4.0, gap_s=60.0)
    ),
    # stranded holds
    "pd-prefill-stranded-kv": Scenario(True, "0.5.9", _MAMBA, _BUSY, trigger="@p=0.2"),
    "pd-decode-stranded-kv": Scenario(True, "0.5.9", _MAMBA, _BUSY, trigger="@p=0.2"),
    "decode-offload-acks-behind-retract": Scenario(
        True, "0.5.4.post1", _SMALL, _PRESSURE, {"decode_offload": True}
    ),
    # counter bugs
    "decode-offload-protected-drift": Scenario(True, "0.5.4.post1", _SMALL, _BUSY, {"decode_offload": True}),
    "radix-evictable-overcount": Scenario(False, "0.5.12", _PAGED, _SHARED),
    # the encoder cache (vLLM's manager, emulated generically)
    "encoder-credit-per-step": Scenario(
        False,
        "0.5.9",
        _SMALL,
        replace(_BUSY, mm_fraction=1.0, mm_in_prompt=False, mm_embeds=300),
        {"encoder_cache": EncoderCacheConfig(kind="enc-dec", cache_size=2048, compute_budget=2048)},
    ),
    "encoder-waiting-holds-entries": Scenario(  # a chunked request needs a second image
        False,
        "0.5.12",
        replace(_SMALL, full_kv_tokens=8192, max_running_requests=32),
        replace(
            _BUSY,
            prompt_median=700,
            output_median=200,
            mm_fraction=1.0,
            mm_items=2,
            mm_embeds=128,
            mm_images=3,
        ),
        {"encoder_cache": _IMAGES, "chunked_prefill_size": 256},
    ),
}


def scenario_config(fault: str, *, trigger: str | None = None, **overrides: Any) -> ClusterConfig:
    """The cluster of ``fault``'s scenario with the fault armed (``trigger``: ``""`` for its first
    chance, ``"@30s"``, ``"@step=40"``, ``"@p=0.1"``; default: the scenario's own)."""
    s = SCENARIOS[fault]
    armed = trigger if trigger is not None else s.trigger
    base: dict[str, Any] = {
        "prefill": int(s.pd),
        "decode": int(s.pd),
        "unified": int(not s.pd),
        "version": s.version,
        "shape": s.shape,
        "workload": s.workload,
        "chunked_prefill_size": 512,
        "faults": (parse_fault(f"{fault}{armed}"),),
        "seed": 7,
        **s.extras,
    }
    base.update(overrides)
    return ClusterConfig(**base)
