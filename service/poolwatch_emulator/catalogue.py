"""The fault catalogue: each fault a named reproduction of a real accounting bug class.  Kept whole:
one table of data, the single source of every fault's facts (the demo, scenarios, tests, benchmarks).

Bug-zoo ids are ``/work/shared/bug-zoo.md``'s (S = SGLang, V = vLLM, O = other engines and forks).

===============================  =======  ========  ===========================  ============================
name                             pool     sign      where the real bug lives     real issue / PR (zoo id)
===============================  =======  ========  ===========================  ============================
pd-chunked-mamba-double-free     mamba    surplus   SGLang 0.5.4 - 0.5.5.post1   S01 #12432 -> PR #12994
mamba-cow-leak-on-abort          mamba    deficit   SGLang <= 0.5.4.post3,       S03 PR #12693; S04 #20010
                                                    0.5.5 - 0.5.9                -> PR #21404
full-kv-leak-on-retract          full     deficit   SGLang 0.5.3.post3           S02 #11970 -> PR #12224
pd-decode-abort-kv-leak          full     deficit   SGLang before PR #9817       S06 PR #9817
swa-page-overcount               swa      surplus   SGLang 0.5.12 - 0.5.13       S07 #27789
hicache-host-leak                host     deficit   SGLang HiCache ~0.5.1        S15 PR #9601
hicache-host-double-free         host     surplus   SGLang HiCache <= 0.5.13     S16 PR #27108, PR #27631
spec-stranded-tail-page          full     deficit   SGLang 0.5.5.post3+, EAGLE,  S10 #13741 -> PR #13826;
                                                    page_size > 1                PR #31616
spec-row-clamped-release         full     deficit   SGLang spec v2 before        S11 PR #26972; #33579
                                                    2026-06
spec-swa-frontier-off-by-one     full     surplus   SGLang 0.5.17 with the OOW   S09 PR #34870 (gate
                                                    free env on (SWA + EAGLE)    #34823)
hicache-unlock-without-lock      full     in-flight SGLang fork, HiCache         O12 bytedance-iaas/sglang
                                                    write_back (S13: its lock    PR #748; S13 #27666
                                                    half)
hicache-write-acks-undrained     full     stranded  SGLang HiCache <= 0.5.9      S14 PR #20049
pd-prefill-stranded-kv           full     stranded  vLLM NIXL P side (V05);      V05 PR #20139, PR #25897;
                                                    SGLang NIXL sender           S20 PR #36988
pd-decode-stranded-kv            full     stranded  vLLM NixlPush 0.24 - 0.34    V02 #46283 -> PR #46289;
                                                    (V02); SGLang PD decode      S06 PR #9817
decode-offload-acks-behind-ret.  full     stranded  SGLang 0.5.4.post1, decode   PR #11656 (not in the zoo)
                                                    offload under retraction
decode-offload-protected-drift   full     counter   SGLang 0.5.4.post3 -         S12 PR #12774
                                                    0.5.5.post2
radix-evictable-overcount        full     counter   SGLang RadixCache, paged     #35270 (open); PR #10637
                                                                                 (not in the zoo)
encoder-credit-per-step          encoder  surplus   vLLM 0.13 - 0.34.0 enc-dec   V15 PR #51228, #55733
encoder-waiting-holds-entries    encoder  stall     vLLM multimodal, before      V16 PR #31857
                                                    2026-01
===============================  =======  ========  ===========================  ============================

Signs: *surplus* (a double free: the gap < 0), *deficit* (a leak: the gap > 0), *counter* (an
engine counter lies, every id is where it belongs), *stranded* (the books balance, capacity is
held by owners that no longer progress), *in-flight* (a slot freed while a live request still
reads it: the books balance until it is handed out twice), *stall* (waiting requests, capacity
free, nothing admitted).  The last four are the blind classes of issue 39: the conservation gap
stays honest about the ids and pages nothing (a counter bug: it pages, misnamed as a double free);
:data:`STRANDED`, :data:`COUNTER`, :data:`FREED_IN_FLIGHT` and :data:`STALL` name the alerts
their detectors raise (the detectors' own names, :mod:`poolwatch.detect.families`).  The encoder
cache is a pool like the others (``Pool.ENCODER``): its imbalance pages as the gap's sign says,
:data:`DOUBLE_FREE` or :data:`SLOT_LEAK` with ``pool="encoder"``, in the encoder budget's words.

The encoder cache is vLLM's (``EncoderCacheManager`` / ``EncoderDecoderCacheManager``): SGLang's
own multimodal embedding cache (``MultiModalStaticCache``) is a server-level LRU with no
per-request holders and no admission budget, where neither V15 nor V16 can happen, so the
emulator models vLLM's manager generically, with vLLM's attribute names
(:mod:`poolwatch_emulator.encoder_cache`).  vLLM's V08 (rejected drafts rolling back below blocks
freed on the optimistic count) has no SGLang shape: SGLang's sliding-window eviction runs on the
committed length (``req.seqlen - 1``), which never counts draft tokens, so it is not emulated.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "COUNTER",
    "DOUBLE_FREE",
    "FAULTS",
    "FREED_IN_FLIGHT",
    "HOST_GAP",
    "SLOT_LEAK",
    "STALL",
    "STRANDED",
    "FaultInfo",
]

DOUBLE_FREE = "PoolwatchDoubleFree"
SLOT_LEAK = "PoolwatchSlotLeak"
HOST_GAP = "PoolwatchHostPoolGap"
# issue 39's detectors for what the gap cannot see
STRANDED = "PoolwatchStrandedHold"
COUNTER = "PoolwatchCounterDrift"
STALL = "PoolwatchAdmissionStall"
FREED_IN_FLIGHT = "PoolwatchFreedInFlight"

SIGNS = ("surplus", "deficit", "counter", "stranded", "in-flight", "stall")
POOLS = ("full", "swa", "mamba", "host", "encoder")  # poolwatch's Pool values, and vLLM's encoder cache
FEATURES = ("mamba", "swa", "hicache", "paged", "spec", "offload", "mm", "enc-dec")


@dataclass(frozen=True, slots=True)
class FaultInfo:
    """What a fault breaks, where it is possible, and which real bug it reproduces."""

    name: str
    pool: str  # one of POOLS
    sign: str  # one of SIGNS
    sglang_versions: str  # where the real bug lives (engine and releases)
    reference: str  # bug-zoo id(s), issue and PR numbers
    urls: tuple[str, ...]  # the real threads
    roles: tuple[str, ...]  # worker roles where it can fire
    needs: tuple[str, ...]  # model and server features it needs (FEATURES)
    emulated_versions: tuple[str, ...]
    summary: str
    pages: str  # the alert that should page it
    sticky: bool = False  # once due, it strikes at every chance (a release's code path, not one event)


_ALL = ("0.5.4.post1", "0.5.9", "0.5.12")
_KV_LENS = ("0.5.9", "0.5.12")  # releases whose Req has kv_allocated_len / cache_protected_len
_PRE_0510 = ("0.5.4.post1", "0.5.9")
_S = "https://github.com/sgl-project/sglang/"
_V = "https://github.com/vllm-project/vllm/"
_BOTH = ("prefill", "unified")

FAULTS: dict[str, FaultInfo] = {
    f.name: f
    for f in (
        FaultInfo(
            "pd-chunked-mamba-double-free", "mamba", "surplus", "0.5.4 - 0.5.5.post1",
            "S01 sglang#12432 / PR #12994", (_S + "issues/12432", _S + "pull/12994"), ("prefill",),
            ("mamba",), ("0.5.4.post1",),
            "PD prefill chunk boundary frees the chunked request's Mamba slot (free_mamba_cache default)",
            DOUBLE_FREE,
        ),
        FaultInfo(
            "mamba-cow-leak-on-abort", "mamba", "deficit", "<= 0.5.4.post3 and 0.5.5 - 0.5.9",
            "S03 PR #12693; S04 sglang#20010 / PR #21404",
            (_S + "pull/12693", _S + "issues/20010", _S + "pull/21404"), _BOTH, ("mamba",), _ALL,
            "an aborted waiting request's copy-on-write Mamba slot is never freed", SLOT_LEAK,
        ),
        FaultInfo(
            "full-kv-leak-on-retract", "full", "deficit", "0.5.3.post3", "S02 sglang#11970 / PR #12224",
            (_S + "issues/11970", _S + "pull/12224"), ("decode", "unified"), (), _ALL,
            "a retracted request's last KV page is never freed", SLOT_LEAK,
        ),
        FaultInfo(
            "pd-decode-abort-kv-leak", "full", "deficit", "before PR #9817 (2025-08)", "S06 PR #9817",
            (_S + "pull/9817",), ("decode",), (), _ALL,
            "a PD decode request aborted after KV preallocation keeps its KV slots", SLOT_LEAK,
        ),
        FaultInfo(
            "swa-page-overcount", "swa", "surplus", "0.5.12 - 0.5.13 (speculative decoding, page_size > 1)",
            "S07 sglang#27789", (_S + "issues/27789",), _BOTH, ("swa",), _ALL,
            "a finishing request's last sliding-window page is freed twice", DOUBLE_FREE,
        ),
        FaultInfo(
            "hicache-host-leak", "host", "deficit", "HiCache storage prefetch, ~0.5.1 (SGLang checks no host "
            "conservation)", "S15 PR #9601", (_S + "pull/9601",), _BOTH, ("hicache",), _ALL,
            "a HiCache write-through's host slots are allocated and put on no tree node", HOST_GAP,
        ),
        FaultInfo(
            "hicache-host-double-free", "host", "surplus", "HiCache write_back <= 0.5.13 (0.5.23 asserts on "
            "it, PR #29310)", "S16 PR #27108, PR #27631",
            (_S + "pull/27108", _S + "pull/27631", _S + "pull/29310"), _BOTH, ("hicache",), _ALL,
            "a HiCache write-through's host slots are freed while the tree node keeps them", HOST_GAP,
        ),
        FaultInfo(
            "spec-stranded-tail-page", "full", "deficit", "0.5.5.post3+ with EAGLE and page_size > 1",
            "S10 sglang#13741 / PR #13826; PR #31616",
            (_S + "issues/13741", _S + "pull/13826", _S + "pull/31616"), ("decode", "unified"),
            ("spec", "paged"), _KV_LENS,
            "a paged draft over-allocation is not recorded in kv_allocated_len: its pages are never freed",
            SLOT_LEAK,
        ),
        FaultInfo(
            "spec-row-clamped-release", "full", "deficit", "spec v2 before 2026-06 (topk > 1, page > 1); "
            "DFLASH v2 at page 1 (open)", "S11 PR #26972; sglang#33579",
            (_S + "pull/26972", _S + "issues/33579"), ("decode", "unified"), ("spec",), _KV_LENS,
            "the draft reserve outgrows the req_to_token row: release_kv_cache's slice clamps at the row "
            "end and the slots past it are never freed", SLOT_LEAK,
        ),
        FaultInfo(
            "spec-swa-frontier-off-by-one", "full", "surplus", "0.5.17 with "
            "SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS=1 (hybrid SWA + EAGLE)",
            "S09 PR #34870 (gate sglang#34823)", (_S + "pull/34870", _S + "issues/34823"), _BOTH,
            ("spec", "swa"), _KV_LENS,
            "the bigram key ends one short: the re-match after an insert stops before the new node, "
            "cache_protected_len never advances and the request's release frees KV the tree owns",
            DOUBLE_FREE,
        ),
        FaultInfo(
            "hicache-unlock-without-lock", "full", "in-flight", "an SGLang fork's HiCache write_back (O12); "
            "S13 (0.5.11 - 0.5.20 decode radix + offload) shares its lock half, protected taken off "
            "without dec_lock_ref",
            "O12 bytedance-iaas/sglang PR #748; S13 sglang#27666 / PR #27687",
            ("https://github.com/bytedance-iaas/sglang/pull/748", _S + "issues/27666", _S + "pull/27687"),
            _BOTH, ("hicache",), _ALL,
            "a write issued as write_back (no lock) is acked through the write-through branch: "
            "dec_lock_ref on a node never inc'd, protected pages become evictable under a live request",
            FREED_IN_FLIGHT,
        ),
        FaultInfo(
            "hicache-write-acks-undrained", "full", "stranded", "HiCache write_through <= 0.5.9 "
            "(fixed 0.5.10: flush_write_through_acks)", "S14 PR #20049", (_S + "pull/20049",),
            ("unified",), ("hicache",), _PRE_0510,
            "write-through acks are drained only by the prefill batch builder: in pure decode the "
            "written nodes stay locked, evictable moves to protected", STRANDED, sticky=True,
        ),
        FaultInfo(
            "pd-prefill-stranded-kv", "full", "stranded", "vLLM NIXL prefill side (V05, bounded by the "
            "lease); SGLang's NIXL sender has no abort and no timeout once sent (0.5.4 - 0.5.9)",
            "V05 PR #20139, PR #25897; S20 PR #36926 -> PR #36988",
            (_V + "pull/20139", _V + "pull/25897", _S + "pull/36926", _S + "pull/36988"), ("prefill",),
            (), _ALL,
            "the decode side drops a request after its prefill ran: the prefill keeps its KV, row and "
            "lock in the inflight queue for a transfer nobody reads", STRANDED,
        ),
        FaultInfo(
            "pd-decode-stranded-kv", "full", "stranded", "vLLM NixlPush 0.24 - 0.34 (V02); SGLang PD "
            "decode until SGLANG_DISAGGREGATION_WAITING_TIMEOUT (300 s)",
            "V02 vllm#46283 / PR #46289; S06 PR #9817",
            (_V + "issues/46283", _V + "pull/46289", _S + "pull/9817"), ("decode",), (), _ALL,
            "the prefill side loses a request after the decode preallocated its KV: the decode holds it "
            "in the transfer queue for KV that never arrives", STRANDED,
        ),
        FaultInfo(
            "decode-offload-acks-behind-retract", "full", "stranded", "0.5.4.post1 "
            "(--disaggregation-decode-enable-offload-kvcache); fixed by PR #11656 (0.5.5)",
            "sglang PR #11656 (not in the zoo)", (_S + "pull/11656",), ("decode",), ("offload",),
            ("0.5.4.post1",),
            "the decode loop checks the offloads' acks only when no request is retracted: finished "
            "requests keep their KV while the retracted wait for room they hold", STRANDED, sticky=True,
        ),
        FaultInfo(
            "decode-offload-protected-drift", "full", "counter", "0.5.4.post3 - 0.5.5.post2 "
            "(--disaggregation-decode-enable-offload-kvcache)", "S12 PR #12774", (_S + "pull/12774",),
            ("decode",), ("offload",), ("0.5.4.post1",),
            "the decode offload's release frees KV and row but never takes the request's prefix off "
            "ChunkCache.protected_size_: the counter drifts, every id is free", COUNTER,
        ),
        FaultInfo(
            "radix-evictable-overcount", "full", "counter", "RadixCache with page_size > 1 (open on "
            "main, 2026-08); PR #10637 fixed an earlier key/value mix-up", "sglang#35270; PR #10637",
            (_S + "issues/35270", _S + "pull/10637"), _BOTH, ("paged",), _ALL,
            "evictable_size_ over-counts by whole pages while every id is free (#35270 counts shared "
            "pages twice; the emulator leaves a page on the counter at an eviction)", COUNTER,
        ),
        FaultInfo(
            "encoder-credit-per-step", "encoder", "surplus", "vLLM 0.13 - 0.34.0 encoder-decoder "
            "(unguarded in 0.34.0)", "V15 PR #51228, vllm#55733", (_V + "pull/51228", _V + "issues/55733"),
            ("unified",), ("enc-dec",), _ALL,
            "EncoderDecoderCacheManager.free_encoder_input credits num_free_slots on every decode step",
            DOUBLE_FREE,
        ),
        FaultInfo(
            "encoder-waiting-holds-entries", "encoder", "stall", "vLLM multimodal before 2026-01",
            "V16 PR #31857", (_V + "pull/31857", _V + "pull/31699"), _BOTH, ("mm",), _ALL,
            "a waiting request keeps the encoder-cache entries it took when it is not admitted: a "
            "chunked request cannot get its next image, nothing is admitted with KV free", STALL,
            sticky=True,
        ),
    )
}  # fmt: skip
