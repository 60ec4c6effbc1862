"""An encoder cache on emulated workers that serve multimodal or encoder-decoder requests.

SGLang's own multimodal embedding cache (``mem_cache/multimodal_cache.py``,
``MultiModalStaticCache``) is a server-level LRU of embeddings by content hash: no request holds
an entry, no admission reads it, so neither of the real encoder-cache bugs (vLLM's V15 and V16)
has an SGLang shape.  This module models **vLLM V1's** managers instead, generically, with their
attribute and method names (``vllm/v1/core/encoder_cache_manager.py``), so a probe that reads
vLLM's encoder cache reads this one the same way:

* :class:`EncoderCacheManager` (multimodal models): ``cache_size``, ``num_free_slots``,
  ``num_freeable_slots``, ``cached`` (content hash -> ids of the requests that reference it),
  ``num_embeds_by_hash``, ``request_cached_ids``, ``freeable`` (unreferenced entries, oldest first,
  reclaimed by ``can_allocate``), ``freed``.  Conservation: ``num_free_slots`` plus the embeds of
  every entry in ``cached`` equals ``cache_size``; ``num_freeable_slots`` is ``num_free_slots``
  plus the embeds in ``freeable``.
* :class:`EncoderDecoderCacheManager` (encoder-decoder models): ``cache_size``, ``num_free_slots``,
  ``allocated``, ``to_free``; the slots of an input go back with ``free_encoder_input``.  The
  emulator credits each (request, input) once (the open fix of PR #51228);
  ``encoder-credit-per-step`` (V15) credits on every call, as vLLM 0.13 - 0.34.0 does.
  ``emu_outstanding`` is the emulator's own note of what is allocated and not yet credited back.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from poolwatch_emulator.faults import FaultPlan

__all__ = [
    "EncoderCacheConfig",
    "EncoderCacheManager",
    "EncoderDecoderCacheManager",
    "MultiModalFeatureSpec",
    "PlaceholderRange",
]


@dataclass(frozen=True, slots=True)
class EncoderCacheConfig:
    """The encoder cache of a worker: ``kind`` "mm" (multimodal) or "enc-dec", sizes in embeds."""

    kind: str = "mm"
    cache_size: int = 4096  # vLLM's encoder_cache_size
    compute_budget: int = 4096  # max_num_encoder_input_tokens: embeds one step may encode

    def check(self) -> None:
        if self.kind not in ("mm", "enc-dec"):
            raise ValueError(f"encoder cache: kind must be 'mm' or 'enc-dec', got {self.kind!r}")
        if self.cache_size < 1 or self.compute_budget < 1:
            raise ValueError("encoder cache: cache_size and compute_budget must be >= 1")


@dataclass(frozen=True, slots=True)
class PlaceholderRange:
    offset: int  # the first prompt position the item's embeds fill
    length: int


@dataclass(frozen=True, slots=True)
class MultiModalFeatureSpec:
    identifier: str  # the item's content hash (mm_hash)
    mm_position: PlaceholderRange
    modality: str = "image"


class _Request(Protocol):
    @property
    def request_id(self) -> str: ...

    mm_features: list[MultiModalFeatureSpec]

    def get_num_encoder_embeds(self, input_id: int) -> int: ...


class EncoderCacheManager:
    """Encoder outputs shared by content hash; unreferenced ones reclaimed oldest first."""

    def __init__(self, cache_size: int, faults: FaultPlan | None = None):
        self.cache_size = cache_size
        self.num_free_slots = cache_size
        self.num_freeable_slots = cache_size
        self.cached: dict[str, set[str]] = {}
        self.num_embeds_by_hash: dict[str, int] = {}
        self.request_cached_ids: dict[str, set[int]] = {}
        self.freeable: OrderedDict[str, int] = OrderedDict()
        self.freed: list[str] = []
        self.emu_faults = faults

    def check_and_update_cache(self, request: _Request, input_id: int) -> bool:
        """Whether the input's output is cached; if so the request now references it."""
        mm_hash = request.mm_features[input_id].identifier
        if mm_hash not in self.cached:
            return False
        if not self.cached[mm_hash]:  # it was reclaimable: referenced again
            self.num_freeable_slots -= self.freeable.pop(mm_hash)
        self.cached[mm_hash].add(request.request_id)
        self.request_cached_ids.setdefault(request.request_id, set()).add(input_id)
        return True

    def can_allocate(
        self, request: _Request, input_id: int, encoder_compute_budget: int, num_embeds_to_schedule: int
    ) -> bool:
        """Room for the input (reclaiming unreferenced entries if needed) within the budget."""
        need = request.get_num_encoder_embeds(input_id)
        if need > encoder_compute_budget:
            return False
        need += num_embeds_to_schedule
        if need <= self.num_free_slots:
            return True
        if need > self.num_freeable_slots:
            return False
        while need > self.num_free_slots:
            mm_hash, embeds = self.freeable.popitem(last=False)
            del self.cached[mm_hash], self.num_embeds_by_hash[mm_hash]
            self.freed.append(mm_hash)
            self.num_free_slots += embeds
        return True

    def allocate(self, request: _Request, input_id: int) -> None:
        mm_hash = request.mm_features[input_id].identifier
        embeds = request.get_num_encoder_embeds(input_id)
        self.cached.setdefault(mm_hash, set()).add(request.request_id)
        self.num_embeds_by_hash.setdefault(mm_hash, embeds)
        self.request_cached_ids.setdefault(request.request_id, set()).add(input_id)
        self.num_free_slots -= embeds
        self.num_freeable_slots -= embeds

    def get_cached_input_ids(self, request: _Request) -> set[int]:
        return self.request_cached_ids.get(request.request_id, set())

    def free_encoder_input(self, request: _Request, input_id: int) -> None:
        """Drop the request's reference; an entry nobody references becomes reclaimable."""
        rid = request.request_id
        ids = self.request_cached_ids.get(rid)
        if ids is not None:
            ids.discard(input_id)
            if not ids:
                del self.request_cached_ids[rid]
        mm_hash = request.mm_features[input_id].identifier
        refs = self.cached.get(mm_hash)
        if not refs:
            return
        refs.discard(rid)
        if not refs:
            self.freeable[mm_hash] = self.num_embeds_by_hash[mm_hash]
            self.num_freeable_slots += self.num_embeds_by_hash[mm_hash]

    def free(self, request: _Request) -> None:
        for input_id in list(self.get_cached_input_ids(request)):
            self.free_encoder_input(request, input_id)

    def get_freed_mm_hashes(self) -> list[str]:
        freed = [h for h in self.freed if h not in self.cached]
        self.freed = []
        return freed


class EncoderDecoderCacheManager(EncoderCacheManager):
    """Encoder-decoder models: a budget of slots, each input's slots given back once it ran."""

    def __init__(self, cache_size: int, faults: FaultPlan | None = None):
        self.cache_size = cache_size
        self.num_free_slots = cache_size
        self.allocated: list[str] = []
        self.to_free: list[str] = []
        self.emu_faults = faults
        self.emu_outstanding: dict[tuple[str, int], int] = {}  # (request, input) -> embeds not credited

    def check_and_update_cache(self, request: _Request, input_id: int) -> bool:
        return False

    def can_allocate(
        self, request: _Request, input_id: int, encoder_compute_budget: int, num_embeds_to_schedule: int
    ) -> bool:
        need = request.get_num_encoder_embeds(input_id)
        return need <= encoder_compute_budget and need + num_embeds_to_schedule <= self.num_free_slots

    def allocate(self, request: _Request, input_id: int) -> None:
        embeds = request.get_num_encoder_embeds(input_id)
        self.num_free_slots -= embeds
        self.allocated.append(request.mm_features[input_id].identifier)
        self.emu_outstanding[(request.request_id, input_id)] = embeds

    def get_cached_input_ids(self, request: _Request) -> set[int]:
        return set(range(len(request.mm_features)))

    def free_encoder_input(self, request: _Request, input_id: int) -> None:
        credited = self.emu_outstanding.pop((request.request_id, input_id), None)
        faults = self.emu_faults
        if credited is None and faults is not None and faults.fires("encoder-credit-per-step"):
            credited = request.get_num_encoder_embeds(input_id)  # V15: credited again, every call
        self.num_free_slots += credited or 0

    def free(self, request: _Request) -> None:
        for input_id in range(len(request.mm_features)):
            self.free_encoder_input(request, input_id)

    def get_freed_mm_hashes(self) -> list[str]:
        to_free, self.to_free, self.allocated = self.to_free, self.allocated, []
        return to_free
