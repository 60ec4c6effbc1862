"""SGLang's idle self-check, faithful to the release (reference §1): when it runs, what it
compares and the exact text of its failure, raised as ``ValueError`` (strict) or logged as a
warning every 1000 idle iterations (non-strict, 0.5.5.post3+)."""

from __future__ import annotations

from typing import Any

from poolwatch_emulator.ownership import hybrid
from poolwatch_emulator.versions import IdleGate, MessageStyle

__all__ = ["SchedulerRuntimeCheckerMixin"]


class SchedulerRuntimeCheckerMixin:
    # -- the figures (``_get_*_token_info``) ------------------------------------------------

    def _get_token_info(self: Any) -> tuple[int, float, int, int]:
        available = self.token_to_kv_pool_allocator.available_size()
        evictable = self.tree_cache.evictable_size()
        used = self.max_total_num_tokens - (available + evictable)
        return used, used / self.max_total_num_tokens, available, evictable

    def _get_mamba_token_info(self: Any) -> tuple[int, int, float, float, int, int, int, int]:
        tree = self.is_mamba_tree
        hp = hybrid(self.req_to_token_pool)
        assert hp is not None
        full_avail = self.token_to_kv_pool_allocator.available_size()
        full_evict = self.tree_cache.full_evictable_size() if tree else 0
        mamba_avail = hp.mamba_pool.available_size()
        mamba_evict = self.tree_cache.mamba_evictable_size() if tree else 0
        full_used = self.token_to_kv_pool_allocator.size - (full_avail + full_evict)
        mamba_used = hp.mamba_pool.size - (mamba_avail + mamba_evict)
        full_usage = full_used / self.token_to_kv_pool_allocator.size
        return (
            full_used,
            mamba_used,
            full_usage,
            mamba_used / hp.mamba_pool.size,
            full_avail,
            full_evict,
            mamba_avail,
            mamba_evict,
        )

    def _get_swa_token_info(self: Any) -> tuple[int, int, float, float, int, int, int, int]:
        alloc, tree = self.token_to_kv_pool_allocator, self.tree_cache
        full_avail, full_evict = alloc.full_available_size(), tree.full_evictable_size()
        swa_avail, swa_evict = alloc.swa_available_size(), tree.swa_evictable_size()
        full_used = self.full_tokens_per_layer - (full_avail + full_evict)
        swa_used = self.swa_tokens_per_layer - (swa_avail + swa_evict)
        full_usage, swa_usage = full_used / self.full_tokens_per_layer, swa_used / self.swa_tokens_per_layer
        return full_used, swa_used, full_usage, swa_usage, full_avail, full_evict, swa_avail, swa_evict

    @property
    def emu_is_swa(self: Any) -> bool:
        return bool(getattr(self, self.release.hybrid_attr_names[0]))

    @property
    def emu_is_ssm(self: Any) -> bool:
        return bool(getattr(self, self.release.hybrid_attr_names[1]))

    # -- <= 0.5.10 ----------------------------------------------------------------------------

    def _check_hybrid_memory(self: Any) -> tuple[bool, str]:
        fu, su, _, _, fa, fe, sa, se = self._get_swa_token_info()
        tree = self.tree_cache
        msg = (
            f"self.full_tokens_per_layer={self.full_tokens_per_layer}, full_available_size={fa}, "
            f"full_evictable_size={fe}, self.tree_cache.full_protected_size()={tree.full_protected_size()}\n"
            f"self.swa_tokens_per_layer={self.swa_tokens_per_layer}, swa_available_size={sa}, "
            f"swa_evictable_size={se}, self.tree_cache.swa_protected_size()={tree.swa_protected_size()}\n"
        )
        return fu != 0 or su != 0, msg

    def _check_mamba_memory(self: Any) -> tuple[bool, str]:
        fu, mu, _, _, fa, fe, ma, me = self._get_mamba_token_info()
        fp, mp = self.tree_cache.full_protected_size(), self.tree_cache.mamba_protected_size()
        leak = fu != fp or mu != mp
        hp = hybrid(self.req_to_token_pool)
        assert hp is not None
        line1 = (
            f"full_available_size={fa}, full_evictable_size={fe}, "
            f"self.token_to_kv_pool_allocator.size={self.token_to_kv_pool_allocator.size}, "
            f"self.tree_cache.full_protected_size()={fp}\n"
        )
        line2 = (
            f"mamba_available_size={ma}, mamba_evictable_size={me}, "
            f"self.req_to_token_pool.mamba_pool.size={hp.mamba_pool.size}, "
            f"self.tree_cache.mamba_protected_size()={mp}"
        )
        if leak and self.release.message is MessageStyle.TOKEN_TO_KV_PAGES:
            full, mamba = self.emu_leaked_pages()
            line2 += f", leaked_full_pages={full or None}, leaked_mamba_pages={mamba or None}"
        return leak, line1 + line2 + "\n"

    def emu_leaked_pages(self: Any) -> tuple[set[int], set[int]]:
        """SGLang's census: expected - free - tree (live requests not subtracted; the Mamba range
        is ``range(size)`` although ids start at 1 since 0.5.9, as in SGLang)."""
        alloc = self.token_to_kv_pool_allocator
        hp = hybrid(self.req_to_token_pool)
        assert hp is not None
        free_full = set(alloc.free_pages.tolist() + alloc.release_pages.tolist())
        full = set(range(1, alloc.size + 1)) - free_full - set(self.tree_cache.all_values_flatten().tolist())
        free_mamba = set(hp.mamba_pool.free_slots.tolist())
        tree_mamba = set(self.tree_cache.all_mamba_values_flatten().tolist())
        return full, set(range(hp.mamba_pool.size)) - free_mamba - tree_mamba

    def _check_radix_cache_memory(self: Any) -> tuple[bool, str]:
        _, _, available, evictable = self._get_token_info()
        protected = self.tree_cache.protected_size()
        msg = (
            f"self.max_total_num_tokens={self.max_total_num_tokens}, available_size={available}, "
            f"evictable_size={evictable}, protected_size={protected}\n"
        )
        return available + evictable != self.max_total_num_tokens - protected, msg

    def _check_req_pool(self: Any) -> None:
        pool = self.req_to_token_pool
        total = pool.size + (pool.pre_alloc_size if self.is_decode_mode else 0)
        free = len(pool.free_slots)
        if free == total:
            return
        held = "session_held=0, " if self.release.message is MessageStyle.POOL else ""
        msg = f"req_to_token_pool memory leak detected!available_size={free}, {held}total_size={pool.size}\n"
        self.raise_error_or_warn("count_req_pool_leak_warnings", msg)

    def raise_error_or_warn(self: Any, counter: str, message: str) -> None:
        if not self.release.honours_strict_env or self.settings.idle_check_strict:
            raise ValueError(message)
        count = int(getattr(self, counter))
        if count % 1000 == 0:
            self.logger.warning(message)
        setattr(self, counter, count + 1)

    def check_memory(self: Any) -> None:
        self.emu_idle_checks += 1
        if self.emu_is_swa:
            leak, msg = self._check_hybrid_memory()
        elif self.emu_is_ssm and self.is_mamba_tree:
            leak, msg = self._check_mamba_memory()
        else:
            leak, msg = self._check_radix_cache_memory()
        if leak:
            self.raise_error_or_warn(
                "count_memory_leak_warnings", "token_to_kv_pool_allocator memory leak detected! " + msg
            )
        self._check_req_pool()
        self.emu_maybe_log_idle_metrics()

    def check_tree_cache(self: Any) -> None:
        if self.tree_cache.is_tree_cache() and (self.emu_is_swa or self.is_mamba_tree):
            self.tree_cache.sanity_check()

    def self_check_during_idle(self: Any) -> None:
        if self.release.idle_gate is IdleGate.SELF and not self.is_fully_idle():
            return
        self.check_memory()
        self.check_tree_cache()
        self.new_token_ratio = self.init_new_token_ratio

    # -- >= 0.5.12 ----------------------------------------------------------------------------

    def _check_pool_invariant(
        self: Any, name: str, available: int, evictable: int, protected: int, total: int
    ) -> tuple[bool, str]:
        msg = (
            f"[{name}] total={total}, available={available}, evictable={evictable}, "
            f"protected={protected}, session_held=0, uncached=0"
        )
        return available + evictable + protected != total, msg

    def _check_all_pools(self: Any) -> tuple[bool, list[str]]:
        tree, checks = self.tree_cache, []
        if self.emu_is_swa:
            _, _, _, _, fa, fe, sa, se = self._get_swa_token_info()
            checks.append(("full", fa, fe, tree.full_protected_size(), self.full_tokens_per_layer))
            checks.append(("swa", sa, se, tree.swa_protected_size(), self.swa_tokens_per_layer))
        elif self.emu_is_ssm and self.is_mamba_tree:
            _, _, _, _, fa, fe, ma, me = self._get_mamba_token_info()
            checks.append(("full", fa, fe, tree.full_protected_size(), self.token_to_kv_pool_allocator.size))
            size = self.req_to_token_pool.mamba_pool.size
            checks.append(("mamba", ma, me, tree.mamba_protected_size(), size))
        else:
            _, _, a, e = self._get_token_info()
            checks.append(("full", a, e, tree.protected_size(), self.max_total_num_tokens))
        results = [self._check_pool_invariant(*c) for c in checks]
        messages = [m for _, m in results]
        if checks[-1][0] == "mamba" and results[-1][0]:
            full, mamba = self.emu_leaked_pages()
            messages[-1] += f", leaked_full_pages={full or None}, leaked_mamba_pages={mamba or None}"
        return any(leak for leak, _ in results), messages

    def on_idle(self: Any) -> None:
        if not self.is_fully_idle():
            return
        self.emu_idle_checks += 1
        leak, messages = self._check_all_pools()
        if leak:
            self.raise_error_or_warn(
                "count_memory_leak_warnings", "pool memory leak detected! " + "\n".join(messages)
            )
        self._check_req_pool()
        self.check_tree_cache()
        self.emu_maybe_log_idle_metrics()
        self.new_token_ratio = self.init_new_token_ratio

    def is_fully_idle(self: Any) -> bool:
        """0.5.12's definition; for older releases (which have no such method) the idle the
        release's own check waits for: no batch formed, plus its PD queue gates."""
        if self.release.uses_is_fully_idle:
            idle = self.running_batch.is_empty() and self.chunked_req is None
            idle = idle and (self.last_batch is None or self.last_batch.is_empty())
            idle = idle and (self.cur_batch is None or self.cur_batch.is_empty()) and not self.waiting_queue
            if self.is_prefill_mode:
                idle = idle and not self.disagg_prefill_inflight_queue
                idle = idle and not self.disagg_prefill_bootstrap_queue.queue
            if self.is_decode_mode:
                idle = idle and not self.disagg_decode_prealloc_queue.queue
                idle = idle and not self.disagg_decode_transfer_queue.queue and not self.emu_offloading()
            return idle
        idle = self.cur_batch is None
        if self.is_prefill_mode:
            return idle and not self.disagg_prefill_inflight_queue
        if self.is_decode_mode:
            queues = self.waiting_queue, self.disagg_decode_transfer_queue.queue
            queued = any(queues) or self.disagg_decode_prealloc_queue.queue or self.emu_offloading()
            return idle and not queued
        return idle
