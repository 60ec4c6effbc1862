"""The vocabulary of poolwatch: who a scheduler rank is and what its pools hold.

Everything here is a frozen, typed value with no I/O, so the probe (inside SGLang's scheduler
process), the sidecar and the tests all speak the same language.  The JSON form lives in
:mod:`poolwatch.codec.snapshot`; the arithmetic in :mod:`poolwatch.conservation`.

A pool's slots are each in exactly one of these states (SGLang's own idle check, §1.2 of the
reference)::

    size == available + evictable + protected + held + session_held

``available``    on the allocator's free lists (``free_pages``/``release_pages``/``free_slots``);
``evictable``    owned by the prefix tree with no lock (could be reclaimed);
``protected``    owned by the prefix tree and locked by a live request;
``held``         owned privately by live requests (outside the tree);
``session_held`` kept by streaming sessions between turns (SGLang 0.5.10+).

A figure is ``None`` when the source could not know it (SGLang's ``/metrics`` never exports
``protected`` or ``held``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

_T = TypeVar("_T")

__all__ = [
    "CallSite",
    "CallSiteKind",
    "Exactness",
    "Frame",
    "Incident",
    "IncidentKind",
    "LEAK_KINDS",
    "Phase",
    "Pool",
    "PoolAccount",
    "ProbeHealth",
    "Repair",
    "RepairKind",
    "Role",
    "Snapshot",
    "SourceKind",
    "Tripwire",
    "TripwireKind",
    "WorkerId",
]


class Role(enum.StrEnum):
    """The disaggregation role of a worker (SGLang's ``--disaggregation-mode``)."""

    PREFILL = "prefill"
    DECODE = "decode"
    UNIFIED = "unified"


class SourceKind(enum.StrEnum):
    """Where a snapshot's figures come from (a target's ``source`` and a snapshot's)."""

    PROBE = "probe"  # the in-process probe: exact figures
    SGLANG_METRICS = "sglang-metrics"  # SGLang's /metrics and /get_server_info: coarse figures
    SGLANG_LOG = "sglang-log"  # SGLang's log: incidents and the idle check's figures
    VLLM_METRICS = "vllm-metrics"  # vLLM's /metrics: coarse figures (usage ratio, queues), never a gap
    VLLM_LOG = "vllm-log"  # vLLM's log: EngineCore's fatal errors, its stats lines
    FILE = "file"  # a snapshot file (a fixture, another tool)

    @property
    def channel(self) -> str:
        """What the source reads, whatever the engine: ``probe``, ``metrics``, ``log`` or ``file``
        (an engine's own kinds are named ``<engine>-metrics`` and ``<engine>-log``)."""
        return self.value.rpartition("-")[2]

    @property
    def engine(self) -> str:
        """The engine whose own ``/metrics`` or log this kind reads ("" for ``probe`` and ``file``)."""
        return self.value.rpartition("-")[0]


class Pool(enum.StrEnum):
    """The pools poolwatch accounts for.

    ``full``: full-attention token KV slots; ``swa``: sliding-window KV slots; ``mamba``: Mamba /
    GDN recurrent-state slots (the active pool); ``req``: request rows of ``req_to_token_pool``;
    ``mamba_ckpt``: the int8 checkpoint slots holding the tree's Mamba states
    (``--enable-int8-mamba-checkpoint``, 0.5.23+; then the tree owns no active ``mamba`` slot);
    ``host``: HiCache's host-memory KV slots (``--enable-hierarchical-cache``): ``evictable`` /
    ``protected`` are the tree's host copies without / with a host lock, ``held`` the slots in
    flight in the cache controller's operations (:mod:`poolwatch.probe.sglang.host_census`; on
    0.5.23 the ``kv`` host pool only, size and available only).
    """

    FULL = "full"
    SWA = "swa"
    MAMBA = "mamba"
    REQ = "req"
    MAMBA_CKPT = "mamba_ckpt"
    HOST = "host"


class Phase(enum.StrEnum):
    """``idle`` in SGLang's *fully idle* sense (every queue empty, no batch), else ``busy``."""

    IDLE = "idle"
    BUSY = "busy"
    UNKNOWN = "unknown"


class Exactness(enum.StrEnum):
    """How much a source knows about a pool.

    ``exact``: every term of the conservation equation was read at one loop boundary (the probe).
    ``coarse``: only size, available and evictable (or a used count / usage ratio) are known.
    """

    EXACT = "exact"
    COARSE = "coarse"


class TripwireKind(enum.StrEnum):
    """Identity faults the probe's census can prove, naming slot ids."""

    FREE_DUPLICATE = "free_duplicate"  # a slot id is twice in the free list(s)
    FREE_AND_LIVE = "free_and_live"  # a free slot is also held by a live request
    FREE_AND_TREE = "free_and_tree"  # a free slot is also a prefix-tree node's value
    OVER_SIZE = "over_size"  # more free slots than the pool has
    OUT_OF_RANGE = "out_of_range"  # a free id outside the pool's id range
    MISSING = "missing"  # an id in no list at all (lost)
    LIVE_SHARED = "live_shared"  # two live requests hold the same slot (both are corrupt)
    LIVE_AND_TREE = "live_and_tree"  # a live request privately holds a slot a tree node owns
    # ref-counted block pools (vLLM V1): the per-block reference census
    NEGATIVE_REF = "negative_ref"  # a block's ref_cnt is below zero (freed more often than taken)
    REF_BELOW_OWNERS = "ref_below_owners"  # fewer references than requests listing it (a double free)
    REF_ABOVE_OWNERS = "ref_above_owners"  # more references than owners, nothing may pin it (a leak)
    NULL_BLOCK = "null_block"  # the null block on the free queue, or another block marked null


LEAK_KINDS = frozenset({TripwireKind.MISSING, TripwireKind.REF_ABOVE_OWNERS})  # slots lost, not freed twice


class RepairKind(enum.StrEnum):
    """What the probe's opt-in guard did to a free list (``POOLWATCH_PROBE_GUARD=1``)."""

    QUARANTINE = "quarantine"  # took a slot a live request or the tree owns off the free list
    DEDUPLICATE = "deduplicate"  # removed a second entry of one slot from the free list
    RETURN = "return"  # at idle, gave back a slot proven to be in no set (a leak)
    REFUSE = "refuse"  # refused a free of a slot still owned (or already free), before it ran (guard v2)


class IncidentKind(enum.StrEnum):
    """What a worker said about itself in its log."""

    LEAK_DETECTED = "leak_detected"  # SGLang's idle check fired (crash or warning)
    SCHEDULER_EXCEPTION = "scheduler_exception"  # "Scheduler hit an exception" -> server dies
    TREE_SANITY_FAILED = "tree_sanity_failed"
    BUSY_CHECK_FAILED = "busy_check_failed"  # "Mem Leak Detected!" assertion


@dataclass(frozen=True, slots=True)
class WorkerId:
    """One scheduler rank of one engine worker (a pod, or one server in central mode)."""

    worker: str
    role: Role = Role.UNIFIED
    dp_rank: int = 0
    tp_rank: int = 0
    pp_rank: int = 0
    model: str = ""
    release: str = ""  # the engine's release (on the wire and the info metric also ``sglang_version``)
    instance: str = ""
    engine: str = "sglang"  # the serving engine (poolwatch.engines)
    release_verified: bool = True  # False: a release its probe room never read, read as its nearest family

    @property
    def key(self) -> str:
        """A stable identifier, also used in URLs: ``worker/dp0-tp1-pp0``."""
        return f"{self.worker}/dp{self.dp_rank}-tp{self.tp_rank}-pp{self.pp_rank}"


@dataclass(frozen=True, slots=True)
class PoolAccount:
    """What one source knows of one pool at one moment.  ``None`` means unknown."""

    pool: Pool
    size: int | None
    available: int | None = None
    evictable: int | None = None
    protected: int | None = None
    held: int | None = None
    session_held: int | None = None
    used: int | None = None  # reported directly by SGLang when available/evictable are not
    exactness: Exactness = Exactness.COARSE
    unreadable: tuple[str, ...] = ()  # fields the source tried and failed to read


class CallSiteKind(enum.StrEnum):
    """Where the probe stood when it captured an engine call site (:class:`CallSite`)."""

    FREE = "free"  # inside the engine's call of a free the probe wraps: the innermost frame made it
    NEXT_FREE = "next_free"  # the free had returned before the probe looked: the next identical one
    HOOK = "hook"  # at a scheduler hook, after the fact: where the engine called that hook, not the free


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame of the engine's code: no locals, no argument values."""

    file: str  # relative to the directory holding the engine's package ("sglang/srt/...")
    line: int
    function: str  # its qualified name ("HybridReqToTokenPool.free")


@dataclass(frozen=True, slots=True)
class CallSite:
    """The engine's frames above a finding or a guard action, innermost first (at most a few; the
    probe's own frames and every other package's are left out), captured once per finding."""

    kind: CallSiteKind
    frames: tuple[Frame, ...]
    seq: int = 0  # the scheduler iteration it was captured at (``next_free``: later than the finding)


@dataclass(frozen=True, slots=True)
class Tripwire:
    """A proven identity fault: these slot ids are where they must not be.  With ``page_size > 1``
    the ids are *page* ids of a paged free list, each standing for ``page_size`` slots (the unit
    of the pool's gap), as on :class:`Repair`."""

    kind: TripwireKind
    pool: Pool
    slots: tuple[int, ...]
    first_seen_hook: str  # the scheduler method after which it was first seen
    seq: int  # scheduler iteration of the first sighting
    requests: tuple[str, ...] = ()  # the live requests involved (``live_shared``: both), when known
    page_size: int = 1
    total: int = 0  # how many ids the finding covers, exactly, when more than ``slots`` names (0: len(slots))
    call_site: CallSite | None = None  # the engine's frames where it was found (None: not captured)

    @property
    def count(self) -> int:
        """The exact number of ids found (``slots`` names at most :data:`MAX_NAMED` of them)."""
        return max(self.total, len(self.slots))


@dataclass(frozen=True, slots=True)
class Repair:
    """What the guard did to one pool, of one kind, since the probe started: ``count`` slots in
    all (the unit of the pool's gap); the last action's ids, hook, iteration and affected requests.
    With ``page_size > 1`` the ids are *page* ids of a paged free list, each standing for
    ``page_size`` slots (so one page id and a count of 16 slots agree)."""

    kind: RepairKind
    pool: Pool
    count: int
    slots: tuple[int, ...]
    hook: str
    seq: int
    requests: tuple[str, ...] = ()
    page_size: int = 1
    call_site: CallSite | None = None  # the engine's frames of the last action's ``hook`` (first seen there)


@dataclass(frozen=True, slots=True)
class Incident:
    """A line in a worker's log that says the accounting failed or the scheduler died."""

    kind: IncidentKind
    message: str
    at: float  # unix seconds (the log line's timestamp when it has one)
    pools: tuple[PoolAccount, ...] = ()  # figures parsed out of a leak message


@dataclass(frozen=True, slots=True)
class ProbeHealth:
    """The in-process probe's account of itself."""

    samples_total: int = 0
    errors_total: int = 0
    last_error: str = ""
    sample_cost_seconds: float = 0.0  # last cheap sample, scheduler-thread time
    census_cost_seconds: float = 0.0  # last identity census
    census_total: int = 0
    disabled: bool = False  # kill switch engaged, or the probe gave up
    tripwires_dropped: int = 0  # findings not kept because the tripwire log was full
    guard: bool = False  # the opt-in guard may repair free lists (POOLWATCH_PROBE_GUARD=1)
    guard_return: bool = False  # ... including "return" (off on releases newer than the newest known)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one source knows about one rank at one moment."""

    worker: WorkerId
    seq: int  # scheduler iteration (probe) or a source's own counter
    taken_at: float  # unix seconds
    phase: Phase
    pools: Mapping[Pool, PoolAccount]
    source: str  # a SourceKind value
    queues: Mapping[str, int] = field(default_factory=dict)
    tripwires: tuple[Tripwire, ...] = ()
    incidents: tuple[Incident, ...] = ()  # seen since this source's previous snapshot
    probe: ProbeHealth | None = None
    idle_check_strict: bool | None = None  # SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_IDLE
    boot_id: str = ""  # changes when the scheduler restarts (seq resets)
    repairs: tuple[Repair, ...] = ()  # the guard's actions (probe with POOLWATCH_PROBE_GUARD=1)
    final: bool = False  # the probe's last word: SGLang's idle check is about to crash this rank
    # what is derived from these figures (the pools' findings), computed once per snapshot
    _memo: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def derived(self, key: str, compute: Callable[[], _T]) -> _T:
        """``compute()`` the first time ``key`` is asked of this snapshot, the same value after:
        every consumer (exporter, detector, API, check, the probe's long-poll) shares one
        assessment.  A ``replace()``-d snapshot starts with an empty memo."""
        if key not in self._memo:
            self._memo[key] = compute()
        value: _T = self._memo[key]
        return value
