"""The probe's coarse HiCache ``host`` account on SGLang 0.5.23's own host pool classes, on CPU.

Run inside the 0.5.23 release venv (``scripts/sglang_venv.py 0.5.23``) with this checkout's
``service/`` on ``PYTHONPATH``::

    python tests/sglang_real/check_hicache_0523.py

It builds 0.5.23's own ``MHATokenToKVPoolHost`` and ``MambaPoolHost`` (their real ``clear``,
``alloc`` and ``free``, with the lazily merged ``release_slots``; the buffers are not allocated),
groups them with the real ``HostPoolGroup`` constructor, hangs the group on a ``UnifiedRadixCache``
object, reads it with :func:`poolwatch.probe.sglang.host_census.host_account` and compares with
SGLang's own ``HostPoolGroup.available_size()``.  One JSON line per check; the exit code is the
number of failed checks.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from sglang.srt.mem_cache.hicache_storage import PoolName
from sglang.srt.mem_cache.pool_host.group import HostPoolGroup, PoolEntry
from sglang.srt.mem_cache.pool_host.mamba import MambaPoolHost
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

from poolwatch.conservation import gap
from poolwatch.model.rank import Exactness, PoolAccount
from poolwatch.probe.core.reading import Reading
from poolwatch.probe.sglang.host_census import HostReader, host_account
from rigs.checks import failures, report


def bare(cls: type, size: int, **extra: Any) -> Any:
    """A 0.5.23 host pool without its buffers (the accounting needs none), cleared by its own ``clear``."""
    pool = object.__new__(cls)
    pool.size, pool.page_size, pool.device, pool.lock = size, 1, "cpu", threading.RLock()
    pool.layout, pool.can_use_write_back_jit = "page_first", False
    for name, value in extra.items():
        setattr(pool, name, value)
    cls.clear(pool)
    return pool


def unified(kv_size: int, mamba_size: int, **kv: Any) -> tuple[Any, HostPoolGroup]:
    group = HostPoolGroup(
        [
            PoolEntry(PoolName.KV, bare(MHATokenToKVPoolHost, kv_size, **kv), None, lambda i: i, True),
            PoolEntry(PoolName.MAMBA, bare(MambaPoolHost, mamba_size), None, lambda i: i),
        ]
    )
    tree = object.__new__(UnifiedRadixCache)
    tree.host_pool_group = group
    return type("Sched", (), {"tree_cache": tree})(), group


def read(sched: Any) -> PoolAccount:
    account = host_account(sched, Reading())
    assert account is not None
    return account


def coarse(a: PoolAccount) -> bool:
    none = (a.evictable, a.protected, a.held) == (None, None, None)
    return a.exactness is Exactness.COARSE and none and gap(a) is None


def main() -> int:
    sched, group = unified(64, 8)
    a = read(sched)
    ok = (a.size, a.available) == (64, 64) and coarse(a)
    report("fresh: the KV host pool's size and free, coarse, no gap", ok, (a.size, a.available))
    taken = group.alloc(16)
    assert taken is not None
    group.free(taken[:4])  # parked on release_slots until the next alloc merges them
    a = read(sched)
    ok = (a.available, group.available_size()) == (52, 52) and coarse(a)
    report("alloc 16, free 4 (release_slots): free as SGLang counts it", ok, a.available)
    mamba = group.alloc(3, pool=PoolName.MAMBA)
    b = read(sched)
    ok = mamba is not None and (b.size, b.available) == (64, 52) and group.available_size(PoolName.MAMBA) == 5
    report("a Mamba host alloc leaves the host (KV) account alone", ok, (b.size, b.available))
    # what the probe reads at each sample: back-to-back samples after each alloc and free show
    # SGLang's own figure (the walk budget is for tree walks; this account walks nothing)
    reader, shown = HostReader(), []
    for step in (lambda: group.alloc(8), lambda: group.free(taken[4:10]), lambda: group.alloc(2)):
        step()
        sampled = reader.read(sched, Reading())
        shown.append((sampled.available if sampled is not None else None, group.available_size()))
    ok = all(ours == theirs for ours, theirs in shown) and len({ours for ours, _ in shown}) == 3
    report("back-to-back samples after an alloc, a free, an alloc: SGLang's own free count", ok, shown)
    wide, _ = unified(32, 4, dcp_size=2)
    w = read(wide)
    report("decode context parallelism: size is the logical size", (w.size, w.available) == (64, 64), w.size)
    sched.tree_cache.host_pool_group = None  # UnifiedRadixCache without HiCache
    report("no host pool group: no host pool", host_account(sched, Reading()) is None)
    return failures()


if __name__ == "__main__":
    sys.exit(main())
