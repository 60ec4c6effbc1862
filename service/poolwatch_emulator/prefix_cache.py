"""What every emulated prefix cache answers as SGLang's ``BasePrefixCache`` does: which kind of cache
it is and which hybrid pools its tree tracks (none, unless a subclass says so), and the hybrid
trees' refusal to give one combined counter (SGLang's ``evictable_size()`` and ``protected_size()``
raise ``NotImplementedError`` on its Mamba and SWA radix caches: a caller must ask per pool)."""

from __future__ import annotations

__all__ = ["BasePrefixCache", "HybridCounters"]


class BasePrefixCache:
    def is_tree_cache(self) -> bool:
        return False

    def is_chunk_cache(self) -> bool:
        return False

    def supports_mamba(self) -> bool:
        return False

    def supports_swa(self) -> bool:
        return False


class HybridCounters:
    """Put first among a hybrid tree's bases: its combined counters raise, as SGLang's do."""

    def evictable_size(self) -> int:
        raise NotImplementedError

    def protected_size(self) -> int:
        raise NotImplementedError
