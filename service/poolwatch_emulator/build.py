"""Settings of one emulated scheduler rank, and the pools and cache built from them."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass
from typing import Any

from poolwatch_emulator.allocator import SWATokenToKVPoolAllocator, TokenToKVPoolAllocator
from poolwatch_emulator.caches import MambaRadixCache, RadixCache
from poolwatch_emulator.chunk_cache import ChunkCache
from poolwatch_emulator.encoder_cache import EncoderCacheConfig
from poolwatch_emulator.faults import FaultPlan
from poolwatch_emulator.hicache import HiRadixCache
from poolwatch_emulator.req_pool import HybridReqToTokenPool, ReqToTokenPool
from poolwatch_emulator.spec import SpecConfig
from poolwatch_emulator.swa_cache import SWARadixCache
from poolwatch_emulator.versions import Release

__all__ = ["DisaggregationMode", "ModelShape", "RankSettings", "ServerArgs", "build_pools"]


class DisaggregationMode(enum.StrEnum):
    NULL = "null"
    PREFILL = "prefill"
    DECODE = "decode"


@dataclass(frozen=True, slots=True)
class ModelShape:
    """Pool sizes of the emulated model (per rank)."""

    full_kv_tokens: int = 131_072
    mamba_slots: int | None = 1024  # hybrid GDN/SSM (Qwen3-Next-like); None = no Mamba pool
    swa_kv_tokens: int | None = None  # hybrid SWA; exclusive with mamba_slots
    host_kv_tokens: int | None = None  # HiCache host pool (plain full-attention KV only)
    page_size: int = 1
    max_running_requests: int = 256
    context_len: int = 16_384
    model_path: str = "Qwen/Qwen3-Next-80B-A3B-Instruct"

    def check(self) -> None:
        """Raise ``ValueError`` naming the first inconsistent field."""
        if self.mamba_slots is not None and self.swa_kv_tokens is not None:
            raise ValueError(
                "shape: mamba_slots and swa_kv_tokens are exclusive (a model is SSM- or SWA-hybrid)"
            )
        if self.mamba_slots is not None and self.page_size != 1:
            raise ValueError("shape: the Mamba radix cache of the emulated releases needs page_size 1")
        if self.full_kv_tokens % self.page_size or self.full_kv_tokens < 16 * self.page_size:
            raise ValueError("shape: full_kv_tokens must be a multiple of page_size and at least 16 pages")
        if self.mamba_slots is not None and self.mamba_slots < 3 * self.max_running_requests:
            raise ValueError("shape: mamba_slots must be at least 3 x max_running_requests (SGLang's cap)")
        if self.swa_kv_tokens is not None and self.swa_kv_tokens < self.full_kv_tokens:
            raise ValueError("shape: swa_kv_tokens must be at least full_kv_tokens (no window eviction here)")
        if self.host_kv_tokens is not None and (self.mamba_slots, self.swa_kv_tokens) != (None, None):
            raise ValueError(
                "shape: host_kv_tokens (HiCache) needs a plain model (no mamba_slots, swa_kv_tokens)"
            )
        if self.host_kv_tokens is not None and self.host_kv_tokens < self.full_kv_tokens:
            raise ValueError("shape: host_kv_tokens must be at least full_kv_tokens (SGLang's HiCache rule)")
        if self.max_running_requests < 1 or self.context_len < 64:
            raise ValueError("shape: max_running_requests >= 1 and context_len >= 64 are required")


@dataclass
class ServerArgs:
    """The subset of SGLang's ``ServerArgs`` the emulated scheduler reads (mutable, like SGLang's)."""

    model_path: str
    disaggregation_mode: str
    page_size: int
    chunked_prefill_size: int
    tp_size: int
    dp_size: int
    pp_size: int = 1
    max_running_requests: int = 256
    decode_log_interval: int = 40
    enable_metrics: bool = True
    enable_metrics_for_all_schedulers: bool = False
    disable_radix_cache: bool = False
    max_mamba_cache_size: int | None = None
    context_length: int = 16_384
    disaggregation_decode_enable_offload_kvcache: bool = False
    speculative_algorithm: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class RankSettings:
    """Everything one rank needs besides the shared clock and sinks: what the worker reads from its
    :class:`~poolwatch_emulator.cluster_config.ClusterConfig` for this rank (the defaults are the
    cluster config's, written there once), and what no cluster config varies."""

    release: Release
    mode: DisaggregationMode
    shape: ModelShape
    tp_rank: int
    dp_rank: int
    tp_size: int
    dp_size: int
    chunked_prefill_size: int
    decode_log_interval: int
    idle_check_strict: bool
    speculative: SpecConfig | None
    disaggregation_waiting_timeout: float  # SGLANG_DISAGGREGATION_WAITING_TIMEOUT (decode receiver)
    decode_offload: bool  # --disaggregation-decode-enable-offload-kvcache
    encoder_cache: EncoderCacheConfig | None  # vLLM's encoder cache, generic (encoder_cache.py)
    decode_reserve_per_req: int = 8
    metrics_all_ranks: bool = False

    def server_args(self) -> ServerArgs:
        s, spec = self.shape, self.speculative
        return ServerArgs(
            model_path=s.model_path,
            disaggregation_mode=self.mode.value,
            page_size=s.page_size,
            chunked_prefill_size=self.chunked_prefill_size,
            tp_size=self.tp_size,
            dp_size=self.dp_size,
            max_running_requests=s.max_running_requests,
            decode_log_interval=self.decode_log_interval,
            enable_metrics_for_all_schedulers=self.metrics_all_ranks,
            disable_radix_cache=self.mode is DisaggregationMode.DECODE,
            max_mamba_cache_size=s.mamba_slots,
            context_length=s.context_len,
            disaggregation_decode_enable_offload_kvcache=self.decode_offload,
            speculative_algorithm="EAGLE" if spec else None,
            speculative_num_steps=spec.num_steps if spec else None,
            speculative_eagle_topk=spec.eagle_topk if spec else None,
            speculative_num_draft_tokens=spec.num_draft_tokens if spec else None,
        )

    def row_width(self) -> int:
        """``req_to_token``'s width: the context, plus the draft reserve with speculative decoding."""
        spec = self.speculative
        return self.shape.context_len + (spec.row_headroom(self.shape.page_size) if spec else 0)


def build_pools(rs: RankSettings, faults: FaultPlan) -> tuple[Any, ReqToTokenPool, Any]:
    """(token_to_kv_pool_allocator, req_to_token_pool, tree_cache) for one rank."""
    s, rel = rs.shape, rs.release
    need_sort = rs.mode is not DisaggregationMode.NULL
    allocator: Any
    if s.swa_kv_tokens is not None:
        allocator = SWATokenToKVPoolAllocator(
            s.full_kv_tokens, s.swa_kv_tokens, s.page_size, need_sort=need_sort
        )
    else:
        allocator = TokenToKVPoolAllocator(s.full_kv_tokens, s.page_size, need_sort=need_sort)
    decode = rs.mode is DisaggregationMode.DECODE
    rows = s.max_running_requests
    pre_alloc = 2 * rows if decode and rows <= 32 else 0
    common = {"first_row": rel.req_first_row, "pre_alloc_size": pre_alloc}
    pool: ReqToTokenPool
    if s.mamba_slots is not None:
        pool = HybridReqToTokenPool(
            rows,
            rs.row_width(),
            s.mamba_slots,
            mamba_first_id=rel.mamba_first_id,
            split_mamba_free=rel.split_mamba_free,
            **common,
        )
    else:
        pool = ReqToTokenPool(rows, rs.row_width(), free_by_req=rel.split_mamba_free, **common)
    cache: Any
    if decode:
        cache = ChunkCache(pool, allocator, s.page_size, faults, counts_protected=rel.chunk_cache_protected)
    elif s.mamba_slots is not None:
        cache = MambaRadixCache(pool, allocator, s.page_size, faults)
    elif s.host_kv_tokens is not None:
        cache = HiRadixCache(pool, allocator, s.page_size, faults, s.host_kv_tokens)
    elif s.swa_kv_tokens is not None:
        cache = SWARadixCache(pool, allocator, s.page_size, faults)
    else:
        cache = RadixCache(pool, allocator, s.page_size, faults)
    if rs.speculative is not None:
        cache.emu_narrow_row = s.context_len + rs.speculative.narrow_headroom()  # the row before PR #26972
        cache.is_eagle = True
    return allocator, pool, cache
