"""Requests and batches with SGLang's field names (``managers/schedule_batch.py``, reference §2.5).

A ``Req`` carries what ownership needs: ``req_pool_idx`` (row or None), ``mamba_pool_idx`` (a
1-element int64 tensor or None), ``prefix_indices`` (tree-owned prefix slots, plus the unaligned
tail between chunks when ``page_size > 1``), ``last_node`` (the one node it locks),
``fill_ids``, ``origin_input_ids``, ``output_ids`` and the ``kv_committed_len`` /
``kv_allocated_len`` / ``cache_protected_len`` triple.  The emulator never over-allocates (no
overlap scheduling), so ``kv_allocated_len == kv_committed_len`` except with speculative decoding
(:mod:`poolwatch_emulator.spec`).  A multimodal request carries vLLM's ``mm_features``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from poolwatch_emulator.encoder_cache import MultiModalFeatureSpec, PlaceholderRange

if TYPE_CHECKING:
    import torch

__all__ = ["ForwardMode", "Req", "RequestSpec", "ScheduleBatch"]


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request of the workload, shared by every rank that serves it."""

    rid: str
    input_ids: tuple[int, ...]
    max_new_tokens: int
    arrival: float  # simulated seconds
    transfer_latency: float = 0.0  # PD: prefill done -> KV on the decode side
    abort_at: float | None = None  # simulated seconds, or never
    mm_items: tuple[tuple[str, int, int], ...] = ()  # (content hash, offset, length) of its images


class ForwardMode(enum.Enum):
    EXTEND = "extend"
    DECODE = "decode"

    def is_extend(self) -> bool:
        return self is ForwardMode.EXTEND

    def is_decode(self) -> bool:
        return self is ForwardMode.DECODE


class Req:
    """One request as one scheduler rank sees it."""

    def __init__(self, spec: RequestSpec, origin_input_ids: list[int]):
        import torch

        self.rid = spec.rid
        self.spec = spec
        self.origin_input_ids = origin_input_ids
        self.output_ids: list[int] = []
        self.fill_ids: list[int] = []
        self.max_new_tokens = spec.max_new_tokens
        self.prefix_indices: torch.Tensor = torch.empty((0,), dtype=torch.int64)
        self.last_node: Any = None
        self.req_pool_idx: int | None = None
        self.emu_row_held = False  # emulator bookkeeping: req_pool_idx may be stale (0.5.4)
        self.mamba_pool_idx: torch.Tensor | None = None
        self.extend_input_len = 0
        self.kv_committed_len = 0
        self.kv_allocated_len = 0
        self.cache_protected_len = 0
        self.swa_evicted_seqlen = 0  # the emulated SWA pool has no window eviction (0.5.9+ field)
        self.last_matched_prefix_len = 0  # the 0.5.4 name of cache_protected_len
        self.kv_committed_freed = False
        self.kv_overallocated_freed = False
        self.is_chunked = 0
        self.is_retracted = False
        self.finished_reason: str | None = None
        self.to_finish: str | None = None
        self.transfer: Any = None  # the PD transfer this request belongs to
        self.mm_features = [  # vLLM's name: the request's encoder inputs (encoder_cache.py)
            MultiModalFeatureSpec(h, PlaceholderRange(offset, length)) for h, offset, length in spec.mm_items
        ]

    @property
    def request_id(self) -> str:
        """vLLM's name for the id (the encoder cache keys its references by it)."""
        return self.rid

    def get_num_encoder_embeds(self, input_id: int) -> int:
        return self.mm_features[input_id].mm_position.length

    @property
    def seqlen(self) -> int:
        return len(self.origin_input_ids) + len(self.output_ids)

    def finished(self) -> bool:
        return self.finished_reason is not None

    def check_finished(self) -> None:
        if self.finished():
            return
        if self.to_finish is not None:
            self.finished_reason, self.to_finish = self.to_finish, None
        elif len(self.output_ids) >= self.max_new_tokens:
            self.finished_reason = "length"

    def set_protected(self, length: int) -> None:
        self.cache_protected_len = length
        self.last_matched_prefix_len = length

    def reset_for_retract(self) -> None:
        import torch

        self.prefix_indices = torch.empty((0,), dtype=torch.int64)
        self.last_node = None
        self.fill_ids = []
        self.extend_input_len = 0
        self.kv_committed_len = self.kv_allocated_len = 0
        self.set_protected(0)
        self.kv_committed_freed = self.kv_overallocated_freed = False
        self.is_chunked = 0
        self.is_retracted = True

    def __repr__(self) -> str:
        return (
            f"Req(rid={self.rid}, input_ids={len(self.origin_input_ids)}, output_ids={len(self.output_ids)})"
        )


class ScheduleBatch:
    """A batch of requests of one forward mode."""

    def __init__(self, reqs: list[Req] | None = None, forward_mode: ForwardMode = ForwardMode.DECODE):
        self.reqs: list[Req] = list(reqs or [])
        self.forward_mode = forward_mode
        self.batch_is_full = False

    def is_empty(self) -> bool:
        return not self.reqs

    def batch_size(self) -> int:
        return len(self.reqs)

    def filter_batch(self, chunked_req_to_exclude: Req | None = None) -> None:
        self.reqs = [r for r in self.reqs if not r.finished() and r is not chunked_req_to_exclude]

    def merge_batch(self, other: ScheduleBatch) -> None:
        self.reqs.extend(other.reqs)

    def __len__(self) -> int:
        return len(self.reqs)
