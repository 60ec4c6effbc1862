"""The SGLang releases the emulator reproduces, and what differs between them (reference §0-§2).

Each :class:`Release` is data: the scheduler, pools and checks read its switches instead of
comparing version strings.  Three shapes are modelled:

=============  =============  ==========  =================  ========================  ==============
release        mamba ids      req rows    chunked req row    mamba free API            idle gate
=============  =============  ==========  =================  ========================  ==============
0.5.4.post1    0..size-1      0..size-1   freed per chunk    free(idx, free_mamba=T)   callers
0.5.9          1..size        0..size-1   kept               free(req)+free_mamba_..   self_check
0.5.12         1..size        1..size     kept               free(req)+free_mamba_..   is_fully_idle
=============  =============  ==========  =================  ========================  ==============
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

__all__ = ["RELEASES", "IdleGate", "MessageStyle", "Release", "parse_release"]


class IdleGate(enum.StrEnum):
    """Who decides that the idle check may run."""

    CALLERS = "callers"  # 0.5.4: each event loop gates ``self_check_during_idle()`` itself
    SELF = "self"  # 0.5.9: ``self_check_during_idle()`` returns early on PD queues
    FULLY_IDLE = "fully_idle"  # 0.5.12: ``on_idle()`` runs only when ``is_fully_idle()``


class MessageStyle(enum.StrEnum):
    """The text of the idle-check failure."""

    TOKEN_TO_KV = "token_to_kv"  # ``token_to_kv_pool_allocator memory leak detected! ...``
    TOKEN_TO_KV_PAGES = "token_to_kv_pages"  # the same plus ``leaked_*_pages`` on a mamba leak
    POOL = "pool"  # ``pool memory leak detected! [full] total=...``


@dataclass(frozen=True, slots=True)
class Release:
    """What the emulator must do differently for one SGLang release."""

    name: str
    mamba_first_id: int  # first id on MambaPool.free_slots
    req_first_row: int  # first row on ReqToTokenPool.free_slots
    keeps_row_across_chunks: bool  # a chunked request keeps req_pool_idx between chunks
    split_mamba_free: bool  # HybridReqToTokenPool.free(req) + free_mamba_cache(req)
    honours_strict_env: bool  # SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_IDLE exists
    idle_gate: IdleGate
    message: MessageStyle
    disagg_prefill_getter: bool  # the PD prefill loop calls get_next_disagg_prefill_batch_to_run
    hybrid_attr_names: tuple[str, str]  # (swa, ssm) flags on the scheduler
    engine_type_by_role: bool  # metrics label engine_type is prefill/decode (else "unified")
    has_mamba_usage_gauge: bool
    has_raw_pool_gauges: bool  # sglang:{kv,swa,mamba}_{available,evictable,used}_tokens
    has_max_total_gauge: bool
    bootstrap_gauge: str  # name of the PD prefill bootstrap-queue gauge
    log_style: str  # "0.5.4" | "0.5.9" | "0.5.12" line formats (reference §5.3)
    chunk_cache_protected: bool  # ChunkCache.protected_size() reports protected_size_ (PD decode)

    @property
    def uses_is_fully_idle(self) -> bool:
        return self.idle_gate is IdleGate.FULLY_IDLE


# each release is the one before it with what changed
_054 = Release(
    name="0.5.4.post1",
    mamba_first_id=0,
    req_first_row=0,
    keeps_row_across_chunks=False,
    split_mamba_free=False,
    honours_strict_env=False,
    idle_gate=IdleGate.CALLERS,
    message=MessageStyle.TOKEN_TO_KV,
    disagg_prefill_getter=False,
    hybrid_attr_names=("is_hybrid", "is_hybrid_gdn"),
    engine_type_by_role=False,
    has_mamba_usage_gauge=False,
    has_raw_pool_gauges=False,
    has_max_total_gauge=False,
    bootstrap_gauge="sglang:num_prefill_prealloc_queue_reqs",
    log_style="0.5.4",
    chunk_cache_protected=True,
)
_059 = replace(
    _054, name="0.5.9", mamba_first_id=1, keeps_row_across_chunks=True, split_mamba_free=True,
    honours_strict_env=True, idle_gate=IdleGate.SELF, message=MessageStyle.TOKEN_TO_KV_PAGES,
    disagg_prefill_getter=True, hybrid_attr_names=("is_hybrid_swa", "is_hybrid_ssm"),
    engine_type_by_role=True, has_mamba_usage_gauge=True, has_max_total_gauge=True, log_style="0.5.9",
    chunk_cache_protected=False,
)  # fmt: skip
_0512 = replace(
    _059, name="0.5.12", req_first_row=1, idle_gate=IdleGate.FULLY_IDLE, message=MessageStyle.POOL,
    has_raw_pool_gauges=True, bootstrap_gauge="sglang:num_prefill_bootstrap_queue_reqs", log_style="0.5.12",
)  # fmt: skip
RELEASES: dict[str, Release] = {r.name: r for r in (_054, _059, _0512)}


def parse_release(name: str) -> Release:
    """The release called ``name``; a clear ``ValueError`` for any other."""
    try:
        return RELEASES[name.strip()]
    except KeyError:
        known = ", ".join(RELEASES)
        raise ValueError(f"unsupported SGLang version {name!r}: the emulator models {known}") from None
