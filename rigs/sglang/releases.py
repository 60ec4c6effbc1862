"""SGLang's releases as the rigs drive them: what differs between them, as data.

Every fact here was read from the release's wheel (its signatures and sources; the venvs hold
them), not from poolwatch's probe, which has its own table (``poolwatch.probe.sglang.shapes``) and
is checked against this one on every release (``tests/sglang_real/check_release.py``).

=============  ===========  =====  ========  ======  =========  ===============  ==========  ========  =====
release        runs on      rows   kv lens   tree    evict      loop / idle      own check   args      spec
=============  ===========  =====  ========  ======  =========  ===============  ==========  ========  =====
0.5.4.post1    its venv     count  --        mamba   split      recv / self_chk  mamba       --        --
0.5.5 (bugs)   0.5.4.post1  count  --        mamba   split      recv / self_chk  mamba       --        --
0.5.5.post2 b  0.5.4.post1  count  req       mamba   split      recv / self_chk  mamba       defaults  --
0.5.5.post3    0.5.4.post1  count  req       mamba   split      recv / self_chk  mamba       defaults  draft
0.5.6          0.5.4.post1  count  req       mamba*  split      recv / self_chk  mamba       defaults  req
0.5.9          its venv     req    req       mamba*  params     recv / self_chk  mamba       defaults  req
0.5.10         0.5.9        req    req       mamba*  params     recv / self_chk  mamba       defaults  req
0.5.11 (bugs)  0.5.9        req    req       mamba*  params     recv / on_idle   pools       defaults  req
0.5.12         0.5.9        req    req       mamba*  params     recv / on_idle   pools       defaults  req
0.5.13         0.5.23 + tf  req    req       mamba*  params     input / on_idle  checker     defaults  req
0.5.17, .18 b  0.5.23 + tf  req    req (kv)  unified params     input / on_idle  checker     resolved  alloc
0.5.19         0.5.23 + tf  req    req.kv    unified params     input / on_idle  checker     resolved  alloc
0.5.20/21 b    0.5.23 + tf  req    req.kv    unified params     ingest / on_idle checker     resolved  alloc
0.5.23         its venv     req    req.kv    unified params     ingest / on_idle checker     resolved  alloc
=============  ===========  =====  ========  ======  =========  ===============  ==========  ========  =====

(``spec``: where spec v2's EAGLE decode tops a request up, :class:`SpecPath` -- ``draft``: the draft
input's ``allocate_lens``, ``req``: the request's ``kv_allocated_len``, ``alloc``:
``alloc_for_spec_decode`` over ``req.kv``, page-aligned; ``input``: ``process_input_requests``, the
loop's first scheduler call where the receiver is a component; ``mamba*``: ``MambaRadixCache`` built
from a ``CacheInitParams``; ``count``: ``alloc(n, reqs)`` / ``free(row)``, the chunked request's row
freed at every chunk boundary; ``(bugs)``, ``b``: only the real-bug suite runs there (``.18 b``:
0.5.18 only); ``+ tf``: with a layer of the transformers the release pins, :data:`LAYERS`; 0.5.17
and 0.5.19 build their Mamba hybrid ranks on their own classes (the probe and guard tiers), 0.5.18,
0.5.20 and 0.5.21 only SWA or dense ones.)  Stdlib only: ``scripts/`` and the tests' collection read
it where SGLang is not installed.

Kept whole: one table -- the release rows and the class whose fields are its columns, read row by
row by the tiers, the drivers and the real-bug suite (as ``poolwatch_emulator.catalogue`` is).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from rigs.table import in_tier, row
from rigs.venv import Venv, cache_root

__all__ = [
    "LAYERS",
    "RELEASES",
    "Check",
    "Release",
    "RowApi",
    "ServerArgs",
    "SpecPath",
    "Tier",
    "release",
    "tier",
]

# Packages an overlay's release pins unlike its base venv, installed once (``--no-deps``) into a
# shared layer that goes on ``PYTHONPATH`` after the overlay: 0.5.13 - 0.5.21 pin a transformers
# older than 0.5.23's, whose own model registrations clash with theirs.
_HUB = ("tokenizers==0.22.2", "huggingface-hub==1.9.0")
LAYERS: dict[str, tuple[str, ...]] = {
    "transformers-5.8.1": ("transformers==5.8.1", *_HUB),
    "transformers-5.12.1": ("transformers==5.12.1", *_HUB),
}


class RowApi(enum.StrEnum):
    """How a request takes and gives back its ``req_to_token`` row."""

    COUNT = "count"  # alloc(n, reqs) / free(row, free_mamba_cache=True); the chunked row freed per chunk
    REQUEST = "request"  # alloc(reqs) / free(req); a chunked request keeps its row


class Check(enum.StrEnum):
    """SGLang's own idle check of the pools, as the release calls it."""

    MAMBA = "mamba"  # SchedulerRuntimeCheckerMixin._check_mamba_memory() -> (leak, message)
    POOLS = "pools"  # the pool invariants of on_idle: _check_full_pool / _check_mamba_pool
    CHECKER = "checker"  # SchedulerInvariantChecker._check_all_pools(observer.get_pool_stats())


class ServerArgs(enum.StrEnum):
    """What the release's classes read from the scheduler process's global ``ServerArgs``."""

    NONE = "none"  # nothing
    DEFAULTS = "defaults"  # the speculative settings and the page size: every field at its default
    RESOLVED = "resolved"  # the Mamba chunk size: a ServerArgs resolved against a model config


class SpecPath(enum.StrEnum):
    """Where spec v2's EAGLE decode tops a running request's KV up, and where the allocated length
    it tops up from is kept (:mod:`rigs.sglang.spec` drives each)."""

    NONE = "none"  # no kv_allocated_len (0.5.4.post1): the over-allocation has nowhere to be recorded
    DRAFT = "draft"  # EagleDraftInput.prepare_for_decode over the draft input's allocate_lens
    REQUEST = "request"  # EagleDraftInput.prepare_for_decode over the request's kv_allocated_len
    ALLOCATION = "allocation"  # eagle_utils.eagle_prepare_for_decode: alloc_for_spec_decode over req.kv

    @property
    def page_aligned(self) -> bool:
        """The top-up ends at a page end (PR #31616's rounding: 0.5.17 on), so at page > 1 no
        request's ``kv_allocated_len`` is left inside a page."""
        return self is SpecPath.ALLOCATION


class Tier(enum.StrEnum):
    """The real-SGLang tiers a release runs in (``tests/sglang_real``)."""

    PROBE = "probe"  # check_release.py: the probe against SGLang's own checks, the seed, guard v1
    GUARD = "guard"  # guard_release.py: guard v2 on every pool
    HICACHE = "hicache"  # check_hicache*.py: the HiCache host account
    WHEEL = "wheel"  # test_wheel_in_sglang.py: the built wheel activating the probe
    BUGS = "bugs"  # rigs/bugs: a real bug's affected or fixed release (tests/bugs)


@dataclass(frozen=True)
class Release:
    """One SGLang release and how its API differs (the columns of this module's table)."""

    version: str
    base: str  # the release whose venv it runs in (itself, or the neighbour its overlay sits on)
    rows: RowApi
    kv_lens: str  # where kv_committed_len / kv_allocated_len live: "" (none), "req", "req.kv"
    unified_tree: bool  # UnifiedRadixCache (else MambaRadixCache)
    tree_params: bool  # the tree is built from a CacheInitParams (else positional pools)
    evict_params: bool  # tree.evict(EvictParams(...)) (else evict(n) + evict_mamba(m))
    insert_flag: bool  # cache_finished_req(req, is_insert=...)
    loop_hook: str  # the scheduler method each event-loop iteration starts with
    idle_hook: str  # the scheduler method SGLang's idle check starts in
    check: Check
    server_args: ServerArgs
    hybrid_flags: tuple[str, str]  # the scheduler's (swa, ssm) attribute names the release reads
    grammar: str  # where the grammar queue hangs: "grammar_queue" or "grammar_manager"
    tiers: frozenset[Tier]
    seed_live: bool = False  # #12432: process_prefill_chunk frees the chunked request's Mamba slot
    mamba_allocator: bool = False  # the Mamba free list on req_to_token_pool.mamba_allocator
    checkpoints: bool = False  # SGLang's int8 MambaCheckpointPool exists
    cow_at_match: bool = True  # any prefix match forks a copy-on-write Mamba slot (0.5.23: only a
    # match at a multiple of its Mamba chunk size, where the tree keeps states)
    plugins: bool = False  # SGLang loads ``sglang.srt.plugins`` entry points (else the probe's .pth)
    sessions: str = ""  # streaming sessions: "" none, "aware" (SessionAwareCache), "streaming" (session/)
    token_array: bool = False  # Req.origin_input_ids is an array('q') (a list before)
    layer: str = ""  # a LAYERS entry the overlay runs with
    fill_len: bool = False  # a round's fill is Req.fill_len over full_untruncated_fill_ids (not fill_ids)
    decode_radix: bool = False  # PD decode pre-allocation matches and locks its own radix tree
    offload_decoding: bool = False  # the PD decode offload copies a request's KV to host at every
    # decode step (0.5.10+: output processing calls offload_kv_cache for unfinished requests too)
    chunk_count: str = "is_chunked"  # the Req's count of chunks in flight (0.5.13: inflight_middle_chunks)
    tree_lock: bool = False  # 0.5.23's unified tree: lock(node), checkpoint_kv_cache, release_kv_cache(
    # checkpoint=) -- 0.5.17 - 0.5.21: inc_lock_ref, cache_unfinished_req(chunked=True), (is_insert=)
    unified_hicache: bool = False  # a dense model's HiCache is UnifiedRadixCache.init_hicache's host
    # pool group (0.5.19 on: the tree registry's default; before, and on 0.5.17 - 0.5.18, HiRadixCache)
    spec: SpecPath = SpecPath.NONE  # spec v2's decode top-up: the draft input's allocate_lens
    # (0.5.5.post2 - .post3), the request's kv_allocated_len (0.5.6 - 0.5.13), or from 0.5.17
    # mem_cache.allocation's alloc_for_spec_decode over req.kv (page-aligned: PR #31616)
    chunk_cache: bool = True  # --disable-radix-cache builds ChunkCache (0.5.23: a disabled UnifiedRadixCache)

    @property
    def overlaid(self) -> bool:
        return self.base != self.version

    @property
    def legacy(self) -> bool:
        """The chunked request's row is freed at every chunk boundary (``alloc(n, reqs)`` API)."""
        return self.rows is RowApi.COUNT

    def venv(self) -> Venv:
        """Where this release runs."""
        root = cache_root()
        overlay = root / "sglang-overlays" / self.version if self.overlaid else None
        return Venv(
            label=f"SGLang {self.version}",
            path=root / "sglang-venvs" / self.base,
            build=f"scripts/sglang_venv.py {self.base}",
            overlay=overlay,
            overlay_build=f"scripts/sglang_overlay.py {self.version}",
            env=(("HF_HUB_OFFLINE", "1"), ("SGLANG_MAMBA_SSM_DTYPE", "float32")),
            layers=(root / "layers" / f"sglang-{self.layer}",) if self.layer else (),
        )


_ALL, _GUARD, _BUGS = frozenset(Tier), frozenset({Tier.GUARD}), frozenset({Tier.BUGS})
# Each row after the first says what changed since the release before it.
_0_5_4 = Release(
    "0.5.4.post1",
    base="0.5.4.post1",
    rows=RowApi.COUNT,
    kv_lens="",
    unified_tree=False,
    tree_params=False,
    evict_params=False,
    insert_flag=False,
    loop_hook="recv_requests",
    idle_hook="self_check_during_idle",
    check=Check.MAMBA,
    server_args=ServerArgs.NONE,
    hybrid_flags=("is_hybrid", "is_hybrid_gdn"),
    grammar="grammar_queue",
    tiers=_ALL,
    seed_live=True,
)
_0_5_5_0 = replace(_0_5_4, version="0.5.5", insert_flag=True, tiers=_BUGS)  # abort_request frees a COW slot
_0_5_5_2 = replace(  # the offload manager's release no longer goes through the tree (S12)
    _0_5_5_0, version="0.5.5.post2", kv_lens="req", server_args=ServerArgs.DEFAULTS, seed_live=False
)
_0_5_5 = replace(
    _0_5_4,
    version="0.5.5.post3",
    kv_lens="req",
    insert_flag=True,
    server_args=ServerArgs.DEFAULTS,
    tiers=_GUARD | _BUGS,
    seed_live=False,
    spec=SpecPath.DRAFT,
)
_0_5_6 = replace(
    _0_5_5,
    version="0.5.6",
    tree_params=True,
    hybrid_flags=("is_hybrid_swa", "is_hybrid_gdn"),
    tiers=_GUARD,
    spec=SpecPath.REQUEST,
)
_0_5_9 = replace(
    _0_5_6,
    version="0.5.9",
    base="0.5.9",
    rows=RowApi.REQUEST,
    evict_params=True,
    hybrid_flags=("is_hybrid_swa", "is_hybrid_ssm"),
    grammar="grammar_manager",
    tiers=_ALL - {Tier.WHEEL},
)
_0_5_10 = replace(_0_5_9, version="0.5.10", tiers=_GUARD | _BUGS, sessions="aware", offload_decoding=True)
_0_5_11 = replace(
    _0_5_10,
    version="0.5.11",
    idle_hook="on_idle",
    check=Check.POOLS,
    plugins=True,
    sessions="streaming",
    tiers=_BUGS,
)
_0_5_12 = replace(_0_5_11, version="0.5.12", tiers=_GUARD | _BUGS)
_0_5_13 = replace(  # on 0.5.23's venv: the scheduler components, the Mamba slot allocator
    _0_5_12,
    version="0.5.13",
    base="0.5.23",
    loop_hook="process_input_requests",  # the receiver is a component; the loop's first call
    check=Check.CHECKER,
    mamba_allocator=True,
    token_array=True,
    fill_len=True,
    chunk_count="inflight_middle_chunks",
    layer="transformers-5.8.1",
    tiers=_GUARD | _BUGS,
)
_0_5_23 = replace(
    _0_5_12,
    version="0.5.23",
    base="0.5.23",
    kv_lens="req.kv",
    unified_tree=True,
    insert_flag=False,
    loop_hook="ingest_requests",
    check=Check.CHECKER,
    cow_at_match=False,
    server_args=ServerArgs.RESOLVED,
    tiers=_ALL,
    mamba_allocator=True,
    checkpoints=True,
    token_array=True,
    decode_radix=True,
    tree_lock=True,
    unified_hicache=True,
    spec=SpecPath.ALLOCATION,
    chunk_cache=False,
)
_0_5_17 = replace(  # the unified tree with SWA; req.kv holds only the allocated and SWA-evicted lengths
    _0_5_13,
    version="0.5.17",
    layer="transformers-5.12.1",
    unified_tree=True,
    server_args=ServerArgs.RESOLVED,
    tiers=frozenset({Tier.PROBE}) | _GUARD | _BUGS,
    checkpoints=True,  # --enable-int8-mamba-checkpoint, req_to_token_pool.mamba_ckpt_pool
    spec=SpecPath.ALLOCATION,
)
_0_5_18 = replace(_0_5_17, version="0.5.18", tiers=_BUGS)
_0_5_19 = replace(  # 0.5.20's req.kv records (S20); a dense model's HiCache on the unified tree
    _0_5_17, version="0.5.19", kv_lens="req.kv", unified_hicache=True
)
_0_5_20 = replace(  # PD decode: its own radix tree, the offload manager's per-request state
    _0_5_23,
    version="0.5.20",
    base="0.5.23",
    layer="transformers-5.12.1",
    decode_radix=True,
    tiers=_BUGS,
    tree_lock=False,
    chunk_cache=True,
)
_0_5_21 = replace(_0_5_20, version="0.5.21")
RELEASES: tuple[Release, ...] = (
    _0_5_4,
    _0_5_5_0,
    _0_5_5_2,
    _0_5_5,
    _0_5_6,
    _0_5_9,
    _0_5_10,
    _0_5_11,
    _0_5_12,
    _0_5_13,
    _0_5_17,
    _0_5_18,
    _0_5_19,
    _0_5_20,
    _0_5_21,
    _0_5_23,
)


def release(version: str) -> Release:
    """The table's row for ``version`` (a release outside the table is a clear error)."""
    return row(RELEASES, version, "SGLang")


def tier(name: Tier) -> tuple[str, ...]:
    """The releases ``name`` runs on, oldest first (a test's parameters)."""
    return in_tier(RELEASES, name)
