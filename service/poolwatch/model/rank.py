"""Who a scheduler rank is, where figures come from, and what one pool holds."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import ClassVar

from poolwatch.inert import inert

__all__ = [
    "ENGINE_CHANNELS",
    "NEUTRAL_CHANNELS",
    "Exactness",
    "IncidentKind",
    "Phase",
    "Pool",
    "PoolAccount",
    "Role",
    "SourceKind",
    "WorkerId",
]


class Role(enum.StrEnum):
    """The disaggregation role of a worker (SGLang's ``--disaggregation-mode``)."""

    PREFILL = "prefill"
    DECODE = "decode"
    UNIFIED = "unified"


class SourceKind(str):
    """Where a snapshot's figures come from (a target's ``source`` and a snapshot's): a string, as on
    the wire and in a targets file.

    The neutral kinds are :attr:`PROBE` (the in-process probe: exact figures) and :attr:`FILE` (a
    snapshot file: a fixture, another tool).  An engine's own faces, read without a probe, are
    ``<engine>-metrics`` (its ``/metrics``: coarse figures) and ``<engine>-log`` (its log: incidents,
    and figures where it prints them) -- ``sglang-metrics``, ``vllm-log`` -- for the engines whose
    registry entry lists those channels (:attr:`poolwatch.engines.EngineEntry.channels`; a targets
    file is checked against it).  A value of neither form is a ``ValueError``.
    """

    __slots__ = ()
    PROBE: ClassVar[SourceKind]
    FILE: ClassVar[SourceKind]

    def __new__(cls, value: str) -> SourceKind:
        engine, dash, channel = value.rpartition("-")
        neutral = not dash and channel in NEUTRAL_CHANNELS
        if not neutral and not (channel in ENGINE_CHANNELS and _ENGINE_NAME.fullmatch(engine)):
            raise ValueError(f"{value!r} is not a source kind (probe, file, <engine>-metrics, <engine>-log)")
        return super().__new__(cls, value)

    @classmethod
    def of(cls, engine: str, channel: str) -> SourceKind:
        """The kind of ``engine``'s own ``channel`` (``metrics`` or ``log``)."""
        return cls(f"{engine}-{channel}")

    @property
    def channel(self) -> str:
        """What the source reads, whatever the engine: ``probe``, ``metrics``, ``log`` or ``file``."""
        return self.rpartition("-")[2]

    @property
    def engine(self) -> str:
        """The engine whose own ``/metrics`` or log this kind reads ("" for ``probe`` and ``file``)."""
        return self.rpartition("-")[0]


NEUTRAL_CHANNELS = ("probe", "file")  # the kinds that are their own channel, whatever the engine
ENGINE_CHANNELS = ("metrics", "log")  # an engine's own faces, read without a probe
_ENGINE_NAME = re.compile(r"[a-z][a-z0-9_]*")
SourceKind.PROBE = SourceKind("probe")
SourceKind.FILE = SourceKind("file")


class Pool(enum.StrEnum):
    """The pools poolwatch accounts for.

    ``full``: full-attention token KV slots; ``swa``: sliding-window KV slots; ``mamba``: Mamba /
    GDN recurrent-state slots (the active pool); ``req``: request rows of ``req_to_token_pool``;
    ``mamba_ckpt``: the int8 checkpoint slots holding the tree's Mamba states
    (``--enable-int8-mamba-checkpoint``, 0.5.23+; then the tree owns no active ``mamba`` slot);
    ``host``: HiCache's host-memory KV slots (``--enable-hierarchical-cache``): ``evictable`` /
    ``protected`` are the tree's host copies without / with a host lock, ``held`` the slots in
    flight in the cache controller's operations (:mod:`poolwatch.probe.sglang.host_census`; on
    0.5.23 the ``kv`` host pool only, size and available only); ``encoder``: vLLM's encoder cache
    (multimodal and encoder-decoder models), in encoder-embedding slots: ``available`` its
    ``num_free_slots``, ``evictable`` the cached outputs no request references, ``held`` those a
    request does (:mod:`poolwatch.probe.vllm.encoder`).  A pool added after the snapshot schema's
    first release travels under its own key (``codec.schema.MORE_POOLS_KEY``).
    """

    FULL = "full"
    SWA = "swa"
    MAMBA = "mamba"
    REQ = "req"
    MAMBA_CKPT = "mamba_ckpt"
    HOST = "host"
    ENCODER = "encoder"


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
    # the serving engine (poolwatch.engines), said by whoever builds one ("": not known); keyword-only
    # and required, so no source can forget it (the wire's default for a snapshot naming none is the
    # codec's, for compatibility)
    engine: str = field(kw_only=True)
    release_verified: bool = True  # False: a release its probe room never read, read as its nearest family

    def __post_init__(self) -> None:
        """Every name made inert (:mod:`poolwatch.inert`), whichever source built it: a worker,
        model or release reaches metric labels, the API, alerts and bundles."""
        for name in ("worker", "model", "release", "instance", "engine"):
            value = getattr(self, name)
            shown = inert(value)
            if shown is not value:
                object.__setattr__(self, name, shown)

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
