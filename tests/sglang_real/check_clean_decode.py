"""``clean_pd_decode`` of :mod:`tests.sglang_real.check_clean`: a dense PD decode rank (its chunk
cache; from 0.5.20 its own radix tree) fed a transferred request every third turn, up to 8
running: SGLang's own ``_pre_alloc`` and ``process_prebuilt``, a token each turn, and its offload
manager copying each request's KV to host and releasing it when the copy is done -- in the loop's
order: ``process_decode_queue`` acknowledges the copies of the turn before, then the batch decodes.
0.5.10 - 0.5.12 release without the offload (it frees KV a decoding request still reads: S29).
"""

from __future__ import annotations

from typing import Any

from rigs.sglang.driver import Driver
from rigs.timeline import Timeline
from tests.sglang_real.clean_traffic import MAX_RUNNING, STEPS, Traffic, drained, started

__all__ = ["OFFLOAD_FREES_LIVE_KV", "pd_decode"]

# the releases whose decode offload frees a decoding request's KV (S29, rigs/bugs/sglang/s29.py: a
# real use after free the probe pages): their clean decode rank runs without the offload
OFFLOAD_FREES_LIVE_KV = frozenset({"0.5.10", "0.5.11", "0.5.12"})


def decode_rank(version: str) -> dict[str, Any]:
    """A dense PD decode rank with SGLang's offload of finished requests to host: its chunk cache,
    or from 0.5.20 its own radix tree (``--disaggregation-decode-enable-radix-cache``)."""
    from rigs.sglang.releases import ServerArgs, release
    from rigs.sglang.server_args import DENSE

    server: dict[str, Any] = {
        "disaggregation_mode": "decode",
        "disaggregation_decode_enable_offload_kvcache": version not in OFFLOAD_FREES_LIVE_KV,
    }
    if release(version).server_args is ServerArgs.RESOLVED:  # (0.5.17 on: checked as resolved)
        server.update(model_path=str(DENSE), hicache_storage_backend="file")  # the offload's storage
    if not release(version).decode_radix:
        return {"dense": "chunk", "server": server}
    server.update(
        model_path=str(DENSE),
        disaggregation_transfer_backend="nixl",
        disaggregation_decode_enable_radix_cache=True,
        hicache_storage_backend="file",
    )
    return {"dense": "radix", "server": server}


def room(d: Driver, tokens: int) -> None:
    """A dense decode rank's allocation helper: its tree evicted until ``tokens`` KV slots are free
    (a chunk cache has nothing to evict: its slots come back as the offloads complete)."""
    tree, short = d.sched.tree_cache, tokens - d.sched.token_to_kv_pool_allocator.available_size()
    if short <= 0 or not hasattr(tree, "evict"):
        return
    if d.release.evict_params:
        from sglang.srt.mem_cache.base_prefix_cache import EvictParams

        tree.evict(EvictParams(num_tokens=short))
    else:
        tree.evict(short)


def pd_decode(version: str) -> tuple[Timeline, dict[str, Any]]:
    d, timeline = started(
        version, "decode", kv=2048, rows=32, context=512, pre_alloc=8, **decode_rank(version)
    )
    offload = version not in OFFLOAD_FREES_LIVE_KV
    d.open_offload() if offload else d.open_decode()
    s, traffic = d.sched, Traffic(d)
    landing: list[Any] = []
    for turn in range(STEPS):
        if landing:
            d.prebuilt(landing)  # last turn's transfers done: they run
            landing = []
        if turn % 3 == 0 and len(s.running_batch.reqs) < MAX_RUNNING:
            req = traffic.arrive()
            req.output_ids.append(5)  # the first token, sampled by the prefill rank
            d.transferred(req)
            landing = [req]
        decoded(d)
    if landing:
        d.prebuilt(landing)
    while s.running_batch.reqs:
        decoded(d)
    d.offload_done()
    timeline_, figures = drained(d, timeline, traffic)
    return timeline_, {**figures, "offload": offload}


def decoded(d: Driver) -> None:
    """A decode rank's turn in its loop's order: ``process_decode_queue`` acknowledges the copies
    to host of the turn before (the offload's releases), the running requests decode a token each
    (room made first), the loop's boundary."""
    room(d, len(d.sched.running_batch.reqs))
    d.offload_done()
    for req in list(d.sched.running_batch.reqs):
        d.decode_one(req)
    d.loop()
