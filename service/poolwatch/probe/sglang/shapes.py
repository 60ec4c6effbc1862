"""What differs between SGLang releases, as data the probe's readers consult (reference §0, §6.4).

Each :class:`Shape` names one *release family*: the releases in it lay out the scheduler, the
pools and the requests the same way for everything the probe reads.  ``shape_for_version`` maps a
version string onto the newest family that is not newer than it, so an unknown patch release
reads like its closest known ancestor (and the snapshot says which family was used).

=========  ===========  ========  ===================  ========================  =============
family     mamba ids    req rows  held full KV         stale ``req`` pointers    idle hook
=========  ===========  ========  ===================  ========================  =============
0.5.4      0..size-1    0..size-1 seqlen - prefix      row + mamba stay set      self_check..
0.5.5.post3 0..size-1   0..size-1 allocated - prefix   row + mamba stay set      self_check..
0.5.9      1..size      0..size-1 allocated - protect  mamba stays on donation   self_check..
0.5.12     1..size      1..size   allocated - protect  mamba stays on donation   on_idle
0.5.13     1..size *    1..size   allocated - protect  mamba stays on donation   on_idle
0.5.17     1..size *    1..size   ``req.kv`` lengths   ``req.kv`` None on free   on_idle
0.5.19     1..size *    1..size   ``req.kv`` records   none (``kv.holds_*``)     on_idle
0.5.20     1..size      1..size   ``req.kv`` records   none (``kv.holds_*``)     on_idle
0.5.23     1..size      1..size   ``req.kv`` records   none (``kv.holds_*``)     on_idle
=========  ===========  ========  ===================  ========================  =============

Where each family frees slots, and so where guard v2 refuses (keyed by ``Shape.family``), is
:data:`poolwatch.probe.sglang.guard.paths.GUARD_PATHS`: ``mamba_pool.free`` up to 0.5.6, plus
``free_mamba_cache`` from 0.5.9, ``mamba_allocator.free`` + ``free_mamba_cache`` from 0.5.13, and
the int8 checkpoint pool from 0.5.17; the KV allocator's row-view frees on every family.  0.5.20 is 0.5.23's
layout, read in its wheel (``req.kv``, ``ingest_requests``, ``mamba_allocator``, the deferred KV
releases' idle gate).  Between them, each read in its wheel: 0.5.13 moves the Mamba free list to
``mamba_allocator`` (``*``; the pool keeps no ``free_slots``); 0.5.17 keeps a request's allocated
and SWA-evicted lengths in ``req.kv`` (a ``ReqKvInfo``, ``None`` once released) while its row and
``cache_protected_len`` stay on the request; 0.5.19 has 0.5.20's ``req.kv`` records and its deferred KV
releases' idle gate.  From 0.5.13 to
0.5.19 a loop receives through its ``request_receiver`` component and then calls the scheduler's
``process_input_requests``, the loop hook there (``recv_requests`` is no scheduler method; 0.5.20's
``ingest_requests`` is).  Guard v2's free paths of every family are read (its row of
``GUARD_PATHS``; 0.5.17 and 0.5.19 were read for the probe first, ``Shape.guarded`` says which
families are watched only: none now).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, replace

from poolwatch import releases
from poolwatch.probe.core.engine import Release

__all__ = [
    "NEWEST_RELEASE",
    "SHAPES",
    "HeldRule",
    "Shape",
    "for_tree",
    "installed_version",
    "known_release",
    "parse_version",
    "shape_for_version",
    "shape_of",
    "shape_or_newest",
]

# The newest release whose wheels were read (its family is the newest shape): on a newer one the
# layout may have moved where neither the census nor the counters look, so guard's "return" stays off.
NEWEST_RELEASE = (0, 5, 23, 0)


class HeldRule(enum.StrEnum):
    """How a request's private full-KV footprint is computed."""

    SEQLEN = "seqlen"  # 0.5.4: no kv_*_len fields; allocated = seqlen - 1 (fill_ids while chunked)
    ALLOCATED_PREFIX = "allocated_prefix"  # 0.5.5.post3: kv_allocated_len - len(prefix_indices)
    ALLOCATED_PROTECTED = "allocated_protected"  # 0.5.6+: kv_allocated_len - cache_protected_len
    KV_LENGTHS = "kv_lengths"  # 0.5.17: req.kv.kv_allocated_len (req.kv None once freed) - protected
    REQ_KV = "req_kv"  # 0.5.23: the same figures under req.kv (ReqKvInfo)


@dataclass(frozen=True, slots=True)
class Shape:
    """The layout of one release family."""

    family: str
    since: tuple[int, ...]
    mamba_first_id: int  # first id on the Mamba free list
    req_first_row: int  # first row on ReqToTokenPool.free_slots
    held_rule: HeldRule
    row_pointer_cleared: bool  # free(req) sets req.req_pool_idx = None
    hybrid_flags: tuple[str, str]  # scheduler attributes (swa, ssm)
    loop_hook: str  # the first call of every event-loop iteration
    idle_hook: str  # where SGLang's own idle check starts
    mamba_allocator: bool  # free list on req_to_token_pool.mamba_allocator (else .mamba_pool)
    has_session_held: bool  # streaming sessions hold rows/KV between turns
    has_ping_pong: bool  # Mamba extra_buffer ping-pong track slots
    # trees of this family that keep no ``cache_protected_len`` (it stays at the first match):
    # their part of a request's KV is ``len(prefix_indices)`` (0.5.6's MambaRadixCache)
    prefix_trees: tuple[str, ...] = ()
    guarded: bool = True  # guard v2's free paths were read for this family (guard.paths.GUARD_PATHS)


_LEGACY = ("is_hybrid", "is_hybrid_gdn")
_MODERN = ("is_hybrid_swa", "is_hybrid_ssm")

# each family is the one before it with what changed (the module docstring's table)
_054 = Shape(
    family="0.5.4",
    since=(0, 5, 4),
    mamba_first_id=0,
    req_first_row=0,
    held_rule=HeldRule.SEQLEN,
    row_pointer_cleared=False,
    hybrid_flags=_LEGACY,
    loop_hook="recv_requests",
    idle_hook="self_check_during_idle",
    mamba_allocator=False,
    has_session_held=False,
    has_ping_pong=False,
)
_0553 = replace(_054, family="0.5.5.post3", since=(0, 5, 5, 3), held_rule=HeldRule.ALLOCATED_PREFIX)
# 0.5.6's ChunkCache moves a prebuilt request's KV to prefix_indices and protected_size_, and its
# MambaRadixCache keeps the tree part there too: neither sets cache_protected_len
_056 = replace(
    _0553, family="0.5.6", since=(0, 5, 6), held_rule=HeldRule.ALLOCATED_PROTECTED,
    hybrid_flags=("is_hybrid_swa", "is_hybrid_gdn"), prefix_trees=("MambaRadixCache", "ChunkCache"),
)  # fmt: skip
_059 = replace(
    _056, family="0.5.9", since=(0, 5, 9), mamba_first_id=1, row_pointer_cleared=True, hybrid_flags=_MODERN,
    has_ping_pong=True, prefix_trees=(),
)  # fmt: skip
_0510 = replace(_059, family="0.5.10", since=(0, 5, 10), has_session_held=True)
_0512 = replace(_0510, family="0.5.12", since=(0, 5, 12), req_first_row=1, idle_hook="on_idle")
_0513 = replace(
    _0512, family="0.5.13", since=(0, 5, 13), mamba_allocator=True, loop_hook="process_input_requests"
)
_0517 = replace(_0513, family="0.5.17", since=(0, 5, 17), held_rule=HeldRule.KV_LENGTHS)
_0519 = replace(_0517, family="0.5.19", since=(0, 5, 19), held_rule=HeldRule.REQ_KV)
_0520 = replace(
    _0512, family="0.5.20", since=(0, 5, 20), held_rule=HeldRule.REQ_KV, loop_hook="ingest_requests",
    mamba_allocator=True,
)  # fmt: skip
_0523 = replace(_0520, family="0.5.23", since=(0, 5, 23))
SHAPES: tuple[Shape, ...] = (_054, _0553, _056, _059, _0510, _0512, _0513, _0517, _0519, _0520, _0523)


def parse_version(text: str) -> tuple[int, ...]:
    """``"0.5.5.post3"`` -> ``(0, 5, 5, 3)``; ``"0.5.9"`` -> ``(0, 5, 9, 0)`` (a pre-release,
    development or local build: the release it leads to).  ValueError if it is not a release
    number (:mod:`poolwatch.releases`)."""
    version = releases.parse(text)
    if version is None:
        raise ValueError(f"unreadable SGLang version {text[:64]!r}")
    return releases.key(version, post=True)


def shape_for_version(text: str) -> Shape:
    """The newest known family not newer than ``text`` (the oldest family for older releases)."""
    version = parse_version(text)
    chosen = SHAPES[0]
    for shape in SHAPES:
        if (*shape.since, 0)[:4] <= version:
            chosen = shape
    return chosen


def installed_version(modules: Mapping[str, object] | None = None) -> str:
    """The running SGLang's version ("" when SGLang is not installed, e.g. the emulator): what its
    own code says (``sglang.version.__version__``) once SGLang is imported (``modules``: the
    process's, ``sys.modules``) -- the code that runs, even where the package's metadata is
    another's (a source tree or a wheel's package put over another release's environment) -- else
    its package metadata's."""
    import importlib
    import sys
    from importlib import metadata

    modules = sys.modules if modules is None else modules
    if "sglang" in modules:
        try:
            own = modules.get("sglang.version") or importlib.import_module("sglang.version")
        except Exception:  # an SGLang without it, or one that fails to say: its metadata
            own = None
        running = getattr(own, "__version__", None)
        if isinstance(running, str) and running:
            return running
    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return ""


def known_release(text: str) -> bool:
    """Whether ``text`` names a final release of a family whose wheels were read: from the first
    family's first release to :data:`NEWEST_RELEASE` (older, newer, unreadable, or a pre-release,
    development or local build -- ``0.5.9rc1``, ``0.5.10.dev3``, ``0.5.9+rocm`` -- no)."""
    version = releases.parse(text)
    if version is None or not releases.final(version):
        return False
    return (*SHAPES[0].since, 0)[:4] <= releases.key(version, post=True) <= NEWEST_RELEASE


def shape_of(release: Release) -> Shape:
    """The family ``release`` is read as (:func:`~poolwatch.probe.sglang.engine.sglang_release` chose
    it; a test may name an older one); by its version when no family has that name."""
    return next((s for s in SHAPES if s.family == release.family), None) or shape_or_newest(release.version)


def for_tree(shape: Shape, tree: object) -> Shape:
    """``shape`` as a rank whose prefix tree is ``tree`` is read: a tree class the family lists in
    ``prefix_trees`` (or a subclass of one) keeps its requests' tree part in ``prefix_indices``."""
    names = {cls.__name__ for cls in type(tree).__mro__}
    if shape.held_rule is HeldRule.ALLOCATED_PROTECTED and names & set(shape.prefix_trees):
        return replace(shape, held_rule=HeldRule.ALLOCATED_PREFIX)
    return shape


def shape_or_newest(text: str) -> Shape:
    """The family of ``text``; the newest known one for an empty or unreadable version."""
    try:
        return shape_for_version(text)
    except ValueError:
        return SHAPES[-1]
