"""Small stand-ins for SGLang's scheduler objects, with SGLang's attribute names (0.5.4 shapes).

A :class:`Rank` is built in a known state: a prefix tree owning some slots (some locked by live
requests), live requests holding rows, private KV and Mamba slots, waiting requests holding a
copy-on-write Mamba slot, and free lists holding the rest; its ``sched`` is an object the probe
reads like a real ``Scheduler``.  Faults are injected by editing the free lists.  The probe tests'
set-ups on them are in ``tests/probe/sglang/setups.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


class SlotAllocator:
    """0.5.23's ``MambaSlotAllocator`` as far as a free goes: ids 1..size, no state touched."""

    def __init__(self, size: int) -> None:
        self.free_slots = torch.arange(1, size + 1)

    def alloc(self, n: int) -> torch.Tensor:
        out, self.free_slots = self.free_slots[:n], self.free_slots[n:]
        return out

    def free(self, ids: torch.Tensor) -> None:
        self.free_slots = torch.cat((self.free_slots, ids))


class DisaggregationMode:
    def __init__(self, value: str) -> None:
        self.value = value


class Allocator:
    def __init__(self, size: int) -> None:
        self.size, self.page_size = size, 1
        self.free_pages = torch.arange(1, size + 1, dtype=torch.int64)
        self.release_pages = torch.empty((0,), dtype=torch.int64)

    def available_size(self) -> int:
        return len(self.free_pages) + len(self.release_pages)

    def take(self, n: int) -> torch.Tensor:
        out, self.free_pages = self.free_pages[:n], self.free_pages[n:]
        return out

    def free(self, ids: torch.Tensor) -> None:
        self.free_pages = torch.cat((self.free_pages, ids.reshape(-1)))


class MambaPool:
    def __init__(self, size: int, first_id: int) -> None:
        self.size = size
        self.free_slots = torch.arange(first_id, first_id + size, dtype=torch.int64)

    def available_size(self) -> int:
        return len(self.free_slots)

    def take(self) -> torch.Tensor:
        out, self.free_slots = self.free_slots[0], self.free_slots[1:]
        return out

    def free(self, ids: torch.Tensor) -> None:
        self.free_slots = torch.cat((self.free_slots, ids.reshape(-1)))


class ReqPool:
    def __init__(self, size: int, context: int, mamba: MambaPool | None) -> None:
        self.size = size
        self.free_slots = list(range(size))
        self.req_to_token = torch.zeros((size, context), dtype=torch.int32)
        if mamba is not None:
            self.mamba_pool = mamba


class Node:
    def __init__(self, value: torch.Tensor, mamba_value: torch.Tensor | None, lock: int = 0) -> None:
        self.value, self.mamba_value = value, mamba_value
        self.full_lock_ref = self.mamba_lock_ref = lock  # MambaRadixCache's per-node lock counts
        self.children: dict[int, Node] = {}


class Tree:
    """MambaRadixCache's counters and a flat tree (root -> nodes) of KV and Mamba values."""

    def __init__(self) -> None:
        self.root_node = Node(torch.empty((0,), dtype=torch.int64), None)
        self.full_evictable_size_ = self.full_protected_size_ = 0
        self.mamba_evictable_size_ = self.mamba_protected_size_ = 0

    def add(self, value: torch.Tensor, mamba_value: torch.Tensor | None, *, locked: bool) -> Node:
        node = Node(value, mamba_value, int(locked))
        self.root_node.children[len(self.root_node.children)] = node
        n_mamba = 0 if mamba_value is None else 1
        if locked:
            self.full_protected_size_ += len(value)
            self.mamba_protected_size_ += n_mamba
        else:
            self.full_evictable_size_ += len(value)
            self.mamba_evictable_size_ += n_mamba
        return node

    def full_evictable_size(self) -> int:
        return self.full_evictable_size_

    def full_protected_size(self) -> int:
        return self.full_protected_size_

    def mamba_evictable_size(self) -> int:
        return self.mamba_evictable_size_

    def mamba_protected_size(self) -> int:
        return self.mamba_protected_size_

    def all_values_flatten(self) -> torch.Tensor:
        values = [n.value for n in self.root_node.children.values()]
        return torch.cat(values) if values else torch.empty((0,), dtype=torch.int64)


class Req:
    def __init__(self, rid: str, origin: int) -> None:
        self.rid = rid
        self.origin_input_ids = list(range(origin))
        self.output_ids: list[int] = []
        self.fill_ids: list[int] = []
        self.prefix_indices = torch.empty((0,), dtype=torch.int64)
        self.req_pool_idx: int | None = None
        self.mamba_pool_idx: torch.Tensor | None = None
        self.finished_reason: str | None = None
        self.last_node: Any = None

    def finished(self) -> bool:
        return self.finished_reason is not None


class Queue:
    def __init__(self) -> None:
        self.queue: list[Req] = []


class Batch:
    def __init__(self, reqs: list[Req]) -> None:
        self.reqs = reqs

    def is_empty(self) -> bool:
        return not self.reqs


@dataclass
class Scheduler:
    """The attributes the probe reads, with SGLang 0.5.4's names."""

    token_to_kv_pool_allocator: Allocator
    req_to_token_pool: ReqPool
    tree_cache: Tree
    max_total_num_tokens: int
    is_hybrid: bool = False
    is_hybrid_gdn: bool = True
    disaggregation_mode: DisaggregationMode = field(default_factory=lambda: DisaggregationMode("null"))
    running_batch: Batch = field(default_factory=lambda: Batch([]))
    last_batch: Batch | None = None
    chunked_req: Req | None = None
    waiting_queue: list[Req] = field(default_factory=list)
    grammar_queue: list[Req] = field(default_factory=list)
    disagg_prefill_inflight_queue: list[Req] = field(default_factory=list)
    disagg_prefill_bootstrap_queue: Queue = field(default_factory=Queue)
    enable_overlap: bool = False
    page_size: int = 1
    tp_rank: int = 0
    dp_rank: int | None = None
    pp_rank: int = 0
    gpu_id: int = 0

    def recv_requests(self) -> list[Any]:
        return []

    def self_check_during_idle(self) -> str:
        return "checked"

    def process_prefill_chunk(self) -> None:
        return None


class Rank:
    """Builds a scheduler state step by step, keeping every slot accounted for."""

    def __init__(self, *, kv: int = 64, mamba: int = 8, rows: int = 4, mamba_first_id: int = 0) -> None:
        self.alloc = Allocator(kv)
        self.mamba = MambaPool(mamba, mamba_first_id)
        self.rows = ReqPool(rows, 128, self.mamba)
        self.tree = Tree()
        self.sched = Scheduler(self.alloc, self.rows, self.tree, max_total_num_tokens=kv)

    def cache(self, tokens: int, *, locked: bool = False, with_mamba: bool = True) -> Node:
        """A tree node owning ``tokens`` KV slots (and one Mamba slot)."""
        state = self.mamba.take().reshape(1) if with_mamba else None
        return self.tree.add(self.alloc.take(tokens), state, locked=locked)

    def running(self, rid: str, *, origin: int, outputs: int, prefix: Node | None = None) -> Req:
        """A decoding request: ``origin + outputs - 1`` KV allocated, ``prefix`` owned by the tree."""
        req = self._with_row(rid, origin, prefix)
        req.output_ids = list(range(outputs))
        allocated = origin + outputs - 1
        self._fill_row(req, allocated)
        self.sched.running_batch.reqs.append(req)
        self.sched.last_batch = self.sched.running_batch
        return req

    def chunked(self, rid: str, *, origin: int, chunk: int, role: str = "prefill") -> Req:
        """A chunked-prefill request after its first chunk (``chunk`` tokens extended)."""
        req = self._with_row(rid, origin, None)
        req.fill_ids = req.origin_input_ids[:chunk]
        self._fill_row(req, chunk)
        self.sched.chunked_req = req
        self.sched.last_batch = Batch([req])
        self.sched.disaggregation_mode = DisaggregationMode(role)
        return req

    def waiting(self, rid: str, *, cow: bool) -> Req:
        req = Req(rid, 10)
        if cow:
            req.mamba_pool_idx = self.mamba.take()
        self.sched.waiting_queue.append(req)
        return req

    def _with_row(self, rid: str, origin: int, prefix: Node | None) -> Req:
        req = Req(rid, origin)
        req.fill_ids = list(req.origin_input_ids)
        req.req_pool_idx = self.rows.free_slots.pop(0)
        req.mamba_pool_idx = self.mamba.take()
        if prefix is not None:
            req.prefix_indices = prefix.value
            req.last_node = prefix
        return req

    def _fill_row(self, req: Req, allocated: int) -> None:
        assert req.req_pool_idx is not None
        prefix = len(req.prefix_indices)
        private = self.alloc.take(allocated - prefix)
        row = torch.cat((req.prefix_indices, private)).to(torch.int32)
        self.rows.req_to_token[req.req_pool_idx, : len(row)] = row
