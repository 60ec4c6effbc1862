"""What differs between vLLM V1 releases for what the probe reads: release families, as data.

Every release from 0.10.2 to 0.34.0 was read field by field from its wheel (``pip download --no-deps
vllm==X``): the block pool, the free queue, ``KVCacheBlock``, the single-type managers, the
coordinator, the scheduler's queues, its deferred frees, the connectors' pins.  Releases are grouped
into families by what actually differs; :data:`SHAPES` is the one table the readers consult and the
release table in ``docs/engines/vllm.md`` is generated from (``poolwatch generate``).

A release newer than the newest read is read as the newest family, *unverified*
(:func:`release_of`): the shape check (:mod:`~poolwatch.probe.vllm.shape_check`) must find every field
the probe reads, and the first idle census must balance, before its figures count as exact; guard
stays off there.  An older release, or a version that cannot be parsed, is refused
(:class:`UnknownVllmRelease`).  ``POOLWATCH_ENGINE_VERSION`` reads a build as a named release.

Common to every family: ``scheduler.requests`` (a dict), ``running``, ``waiting``,
``kv_cache_manager.block_pool`` (``blocks``, ``null_block`` = block 0, ``free_block_queue`` with
``num_free_blocks`` and the ``fake_free_list_head``/``tail`` sentinels, ``num_gpu_blocks``),
``kv_cache_manager.coordinator.single_type_managers[*].req_to_blocks`` (one ``defaultdict(list)`` per
KV cache group) and ``KVCacheBlock`` (``block_id``, ``ref_cnt`` a plain int, ``is_null``,
``block_hash``, ``prev_free_block``/``next_free_block``); ``free_blocks`` checks nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from poolwatch import releases
from poolwatch.probe.core.engine import Release, UnknownRelease

__all__ = [
    "NEWEST",
    "READ",
    "SHAPES",
    "UnknownVllmRelease",
    "Version",
    "VllmShape",
    "parse_version",
    "read_release",
    "release_of",
    "shape_for",
    "shape_of_family",
]

Version = tuple[int, int, int]


class UnknownVllmRelease(UnknownRelease):
    """A vLLM version the probe cannot read (older than 0.10.2, or not a version); says what to do."""


@dataclass(frozen=True, slots=True)
class VllmShape:
    """One release family: what its releases lay out alike for everything the probe reads."""

    family: str
    low: Version  # the family's first release
    last: Version  # its last release read
    queues: tuple[str, ...]  # the scheduler's request queues (``len`` of each)
    deferred_frees: bool = False  # Scheduler.deferred_frees: deque[(fence, blocks)], owners until drained
    cow: bool = False  # the managers' _pending_cow_copies: (source, copy), one reference on each
    tail_pins: bool = False  # KVCacheManager._partial_tail_pins: {request: blocks}, owners
    sink_blocks: bool = False  # SinkFullAttentionManager.sink_blocks: off the queue at ref_cnt 0, reserved
    block_pool_ref: str = ""  # KVCacheBlock.pool: "" none, "ref" the pool, "weakref" a weakref to it
    null_counted: bool = False  # the null block's ref_cnt stays 0 (before: touched and freed, any value)
    dp_index: bool = False  # parallel_config.data_parallel_index is the DP rank (data_parallel_rank is 0)
    single_pass_free: bool = False  # free_blocks queues a block the moment it reaches 0 (before: two passes)
    hisparse: bool = False  # HiSparse managers may list blocks they hold no reference to
    note: str = ""  # what changed from the family before (the docs table)


_Q = ("running", "waiting")
# each family is the one before it with what changed (``note``: the docs table's words for it)
# fmt: off
_V10 = VllmShape("v0.10", (0, 10, 2), (0, 13, 0), _Q, note="the first V1 release read")
_V14 = replace(
    _V10, family="v0.14", low=(0, 14, 0), last=(0, 17, 1), sink_blocks=True, dp_index=True,
    note="sink blocks reserved; a dense model's DP rank is data_parallel_index; touch() flat",
)
_V18 = replace(
    _V14, family="v0.18", low=(0, 18, 0), last=(0, 23, 0), queues=(*_Q, "skipped_waiting"),
    note="skipped_waiting queue; KVCacheBlock has slots; the CPU-offload connector pins GPU blocks",
)
_V24 = replace(
    _V18, family="v0.24", low=(0, 24, 0), last=(0, 25, 1), deferred_frees=True, single_pass_free=True,
    note="deferred_frees (fenced by step); free_blocks queues at 0 in one pass",
)
_V26 = replace(
    _V24, family="v0.26", low=(0, 26, 0), last=(0, 26, 0), cow=True,
    note="copy-on-write of a shared tail (_pending_cow_copies, retained copies deferred)",
)
_V27 = replace(
    _V26, family="v0.27", low=(0, 27, 0), last=(0, 28, 0), tail_pins=True,
    note="KVCacheManager._partial_tail_pins own blocks; fault-tolerant busy loop",
)
_V29 = replace(
    _V27, family="v0.29", low=(0, 29, 0), last=(0, 29, 0), tail_pins=False,
    note="_partial_tail_pins gone again (the connector pins instead)",
)
_V30 = replace(
    _V29, family="v0.30", low=(0, 30, 0), last=(0, 30, 0), sink_blocks=False, block_pool_ref="ref",
    hisparse=True,
    note="KVCacheBlock.pool (free_blocks forwards others' blocks); HiSparse host pools; no sinks",
)
_V31 = replace(
    _V30, family="v0.31", low=(0, 31, 0), last=(0, 32, 0), queues=(*_Q, "kv_holding_waiting"),
    note="kv_holding_waiting replaces skipped_waiting",
)
_V33 = replace(
    _V31, family="v0.33", low=(0, 33, 0), last=(0, 33, 0), null_counted=True,
    note="touch() and free_blocks() skip the null block (its ref_cnt stays 0)",
)
_V34 = replace(
    _V33, family="v0.34", low=(0, 34, 0), last=(0, 34, 0),
    queues=(*_Q, "kv_holding_waiting", "async_kv_waiting"), block_pool_ref="weakref",
    note="async_kv_waiting queue; KVCacheBlock.pool is a weakref; block_hash a plain field",
)
# fmt: on
SHAPES: tuple[VllmShape, ...] = (_V10, _V14, _V18, _V24, _V26, _V27, _V29, _V30, _V31, _V33, _V34)
NEWEST = SHAPES[-1]
# every release whose wheel was read (PyPI's final releases from 0.10.2 on; docs/engines/vllm.md)
READ: frozenset[Version] = frozenset(
    (0, minor, patch)
    for minor, patches in {
        10: (2,), 11: (0, 1, 2), 12: (0,), 13: (0,), 14: (0, 1), 15: (0, 1), 16: (0,), 17: (0, 1),
        18: (0, 1), 19: (0, 1), 20: (0, 1, 2), 21: (0,), 22: (0, 1), 23: (0,), 24: (0,), 25: (0, 1),
        26: (0,), 27: (0, 1), 28: (0,), 29: (0,), 30: (0,), 31: (0,), 32: (0,), 33: (0,), 34: (0,),
    }.items()
    for patch in patches
)  # fmt: skip


def parse_version(version: str) -> Version | None:
    """``0.11.0``, ``0.10.1.1``, ``0.33.0+cpu``, ``0.11.1rc2`` -> (major, minor, patch) of the
    release it is or leads to; None when it is not a release number (:mod:`poolwatch.releases`)."""
    parsed = releases.parse(version)
    return None if parsed is None else releases.key(parsed)  # type: ignore[return-value]


def read_release(version: str) -> bool:
    """Whether ``version`` is a final release whose own wheel was read (:data:`READ`): never a
    pre-release, development or local build (``0.34.0rc1``, ``0.33.0.dev12+g1a2b``, ``0.33.0+cu128``),
    a post-release or a fourth number (``0.10.1.1``) of a read one."""
    parsed = releases.parse(version)
    if parsed is None or not releases.final(parsed) or parsed.post is not None or len(parsed.release) > 3:
        return False
    return releases.key(parsed) in READ


def _name(version: Version) -> str:
    return ".".join(map(str, version))


def shape_for(version: str) -> VllmShape:
    """The family ``version`` is read as: the newest whose first release is not newer than it;
    :class:`UnknownVllmRelease` for a release older than the first read, or not a version."""
    parsed = parse_version(version)
    found = [s for s in SHAPES if parsed is not None and s.low <= parsed]
    if not found:
        raise UnknownVllmRelease(
            f"vLLM {version or '(not installed)'} is not a release poolwatch can read (the first is "
            f"{_name(SHAPES[0].low)}); the probe stays off rather than misread its block pool. Set "
            "POOLWATCH_ENGINE_VERSION to read it as a release that was read, or upgrade vLLM."
        )
    return found[-1]


def shape_of_family(family: str) -> VllmShape:
    return next(s for s in SHAPES if s.family == family)


def release_of(version: str, override: str = "") -> Release:
    """The release to read the installed ``version`` as: the family of ``override``
    (``POOLWATCH_ENGINE_VERSION``) when set, else its own; verified only when ``version`` itself
    is a final release whose wheel was read (:func:`read_release`) and the override, if any, names
    that same release -- an override chooses how a build is read, never that it was read (with vLLM
    not installed, ``version`` empty, the override is all there is).  Unverified: coarse until the
    shape check, the free path check and the first idle census pass; guard off.
    :class:`UnknownVllmRelease` for an override that is no release number, or a release older than
    the first family."""
    try:
        wanted = releases.override(override)
    except releases.BadRelease as exc:
        raise UnknownVllmRelease(str(exc)) from None
    installed = version.strip() or override.strip()
    verified = read_release(installed)
    if wanted is not None and version.strip():
        verified = verified and parse_version(installed) == releases.key(wanted) and releases.final(wanted)
    return Release(installed, shape_for(override.strip() or installed).family, verified=verified)
