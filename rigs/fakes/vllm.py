"""A small stand-in for vLLM V1's block pool and scheduler, with the fields the probe reads and the
allocator's own semantics (an intrusive free queue, ``ref_cnt``, hashed blocks at the LRU end).

Written from the behaviour described in /work/shared/reference/vllm-block-pool.md, not copied:
``free_blocks`` checks nothing, exactly like vLLM's, so the faults can be injected the way they
happen there.  The real classes are driven in ``tests/vllm_real``.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False)
class Block:
    block_id: int
    ref_cnt: int = 0
    block_hash: Any = None
    prev_free_block: Block | None = None
    next_free_block: Block | None = None
    is_null: bool = False


class FreeQueue:
    def __init__(self, blocks: list[Block]) -> None:
        self.num_free_blocks = 0
        self.fake_free_list_head = Block(-1)
        self.fake_free_list_tail = Block(-1)
        self.fake_free_list_head.next_free_block = self.fake_free_list_tail
        self.fake_free_list_tail.prev_free_block = self.fake_free_list_head
        for b in blocks:
            self.append(b)

    def append(self, b: Block) -> None:
        last = self.fake_free_list_tail.prev_free_block
        assert last is not None
        last.next_free_block = b
        b.prev_free_block = last
        b.next_free_block = self.fake_free_list_tail
        self.fake_free_list_tail.prev_free_block = b
        self.num_free_blocks += 1

    def remove(self, b: Block) -> None:
        assert b.prev_free_block is not None
        assert b.next_free_block is not None
        b.prev_free_block.next_free_block = b.next_free_block
        b.next_free_block.prev_free_block = b.prev_free_block
        b.prev_free_block = b.next_free_block = None
        self.num_free_blocks -= 1

    def popleft(self) -> Block:
        first = self.fake_free_list_head.next_free_block
        assert first is not None
        assert first is not self.fake_free_list_tail
        self.remove(first)
        return first


class BlockPool:
    """``two_pass``: free as 0.10-0.23 do (every count first, then each occurrence at 0 queued);
    else as 0.24+ do (a block queued the moment it reaches 0)."""

    def __init__(self, n: int, *, two_pass: bool = False) -> None:
        self.two_pass = two_pass
        self.num_gpu_blocks = n
        self.blocks = [Block(i) for i in range(n)]
        self.free_block_queue = FreeQueue(self.blocks)
        self.null_block = self.free_block_queue.popleft()
        self.null_block.is_null = True

    def get_new_blocks(self, k: int) -> list[Block]:
        out = []
        for _ in range(k):
            b = self.free_block_queue.popleft()
            assert b.ref_cnt == 0  # vLLM's own assert, far from the cause
            b.ref_cnt += 1
            out.append(b)
        return out

    def touch(self, blocks: list[Block]) -> None:
        for b in blocks:
            if b.ref_cnt == 0 and not b.is_null:
                self.free_block_queue.remove(b)
            b.ref_cnt += 1

    def free_blocks(self, blocks: Any) -> None:
        if self.two_pass:
            listed = list(blocks)
            for b in listed:
                b.ref_cnt -= 1
            for b in listed:
                if b.ref_cnt == 0 and not b.is_null:
                    self.free_block_queue.append(b)
            return
        for b in blocks:
            if b.is_null:
                continue
            b.ref_cnt -= 1
            if b.ref_cnt == 0:
                self.free_block_queue.append(b)


@dataclass
class FullAttentionManager:
    block_pool: BlockPool
    req_to_blocks: defaultdict[str, list[Block]] = field(default_factory=lambda: defaultdict(list))

    def pop_blocks_for_free(self, rid: str) -> list[Block]:
        return self.req_to_blocks.pop(rid, [])

    def free(self, rid: str) -> None:  # as 0.24+: through its own pop_blocks_for_free
        self.block_pool.free_blocks(list(reversed(self.pop_blocks_for_free(rid))))


@dataclass
class Request:
    request_id: str
    finished: bool = False
    num_computed_tokens: int = 0

    def is_finished(self) -> bool:
        return self.finished


class Scheduler:
    """``requests``/``running``/``waiting`` and ``kv_cache_manager.coordinator.single_type_managers``."""

    def __init__(
        self, n: int = 64, groups: int = 1, deferred: bool = True, *, two_pass: bool = False
    ) -> None:
        pool = BlockPool(n, two_pass=two_pass)
        managers = tuple(FullAttentionManager(pool) for _ in range(groups))
        coordinator = type("Coordinator", (), {"single_type_managers": managers})()
        self.kv_cache_manager = type("KVCacheManager", (), {"block_pool": pool, "coordinator": coordinator})()
        self.requests: dict[str, Request] = {}
        self.running: list[Request] = []
        self.waiting: list[Request] = []
        self.kv_holding_waiting: list[Request] = []
        self.skipped_waiting: list[Request] = []  # 0.18-0.30's name for it
        self.async_kv_waiting: list[Request] = []  # 0.34
        if deferred:
            self.deferred_frees: deque[tuple[int, list[Block]]] = deque()
        self.steps = 0

    @property
    def pool(self) -> BlockPool:
        return self.kv_cache_manager.block_pool  # type: ignore[no-any-return]

    @property
    def managers(self) -> tuple[FullAttentionManager, ...]:
        return self.kv_cache_manager.coordinator.single_type_managers  # type: ignore[no-any-return]

    def add(self, rid: str, blocks: int, *, prefix: list[Block] | None = None) -> list[Block]:
        self.requests[rid] = req = Request(rid)
        self.running.append(req)
        got = list(prefix or [])
        self.pool.touch(got)
        got += self.pool.get_new_blocks(blocks)
        for m in self.managers:
            m.req_to_blocks[rid].extend(got if m is self.managers[0] else self.pool.get_new_blocks(1))
        return got

    def finish(self, rid: str, *, keep_for_transfer: bool = False) -> None:
        req = self.requests[rid]
        req.finished = True
        self.running = [r for r in self.running if r.request_id != rid]
        if keep_for_transfer:
            return
        for m in self.managers:
            m.free(rid)
        del self.requests[rid]

    def schedule(self) -> None:
        self.steps += 1

    def update_from_output(self) -> None:
        return None

    def finish_requests(self, rids: list[str]) -> None:
        for rid in rids:
            self.finish(rid)
