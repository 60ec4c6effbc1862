"""The seam between the neutral probe and an engine room: what only the engine knows, as one spec.

An engine room (``poolwatch/probe/<engine>/``) hands the neutral probe one :class:`Engine`:

* its scheduler class (``module:Class``) and the methods to hook (``hooks``: ``(candidate method
  names, "before"/"after", probe method)``), each hook calling a :class:`~poolwatch.probe.core.probe.
  Probe` entry point;
* how to tell its release (:attr:`Engine.release`: a :class:`Release`, or :class:`UnknownRelease`);
* its one factory, ``open``: a :class:`Reader` on one scheduler -- who the rank is, how to read one
  :class:`EngineSample`, and which :class:`Census` objects it has;
* what is truly extra (``probe``: the ``module:Class`` of a :class:`~poolwatch.probe.core.probe.Probe`
  subclass, named rather than imported, so neither the spec nor this module imports the probe), and
  whether its scheduler calls no hook while idle (``keepalive``);
* which package is its code (``package``, by default the scheduler's top-level package): the frames
  a call site keeps (:mod:`~poolwatch.probe.core.call_site`).

Everything else -- when to sample and to census (:mod:`~poolwatch.probe.core.schedule`),
containment, the snapshot, health, the kill switch and heartbeat, activation, attach and serving --
is done once, by neutral code that never imports a room (pyproject's import contracts).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from poolwatch.model.findings import Tripwire
from poolwatch.model.rank import Phase, Pool, PoolAccount, Role, WorkerId
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.hooks import Hook
from poolwatch.probe.core.reading import Reading
from poolwatch.probe.core.schedule import CensusRule
from poolwatch.probe.core.waiting import Waits

__all__ = [
    "Census",
    "Engine",
    "EngineSample",
    "Proof",
    "ReadAsk",
    "Reader",
    "Release",
    "UnknownRelease",
]


class UnknownRelease(ValueError):
    """The engine's installed release cannot be read safely; the message says what to do."""


@dataclass(frozen=True, slots=True)
class Release:
    """The release a probe reads: its version, the family whose fields it is read as, and whether
    that family was read from this release's own code (``verified``: False for a release newer than
    the newest read, read as that family after the shape check passed; guard stays off)."""

    version: str  # "" when the engine is not installed (the emulator, fakes)
    family: str
    verified: bool = True


@dataclass(frozen=True, slots=True)
class EngineSample:
    """What one read pass found, in every engine's words; ``detail`` is the room's own (the live
    set, the holders), kept for a census taken in the same pass; ``waits`` what waits on the rank
    and what its scheduler did since the last read (:mod:`~poolwatch.probe.core.waiting`; None: the
    room does not read it)."""

    role: Role
    phase: Phase
    pools: dict[Pool, PoolAccount]
    queues: dict[str, int]
    detail: Any = None
    waits: Waits | None = None


@dataclass(frozen=True, slots=True)
class ReadAsk:
    """What the probe asks of one read: to read everything exactly, recalling nothing from an
    earlier read (``exact``: at an idle hook, and when a census is due -- ``due``: those due by the
    clock alone -- since a census needs what it is compared with read fresh)."""

    exact: bool = False
    due: frozenset[str] = frozenset()


class Proof(Protocol):
    """What one census proved about one pool."""

    def tripwires(self, hook: str, seq: int) -> Sequence[Tripwire]: ...

    def body(self) -> dict[str, Any]:
        """The pool's body in ``GET /v1/census`` (:func:`~poolwatch.probe.census.report.census_envelope`)."""
        ...


class Census(Protocol):
    """One identity census of a room (``name``: how the schedule and health know it)."""

    @property
    def name(self) -> str: ...

    @property
    def pools(self) -> frozenset[Pool]:
        """Its pools: a new exact gap in one of them runs it at once."""
        ...

    def rule(self, config: ProbeConfig) -> CensusRule: ...

    def run(
        self, sample: EngineSample, reading: Reading, *, idle: bool, lost: Mapping[Pool, int]
    ) -> Sequence[Proof]:
        """``lost``: the sample's exact deficits while busy (ids that account for exactly one may be
        named as lost); empty at idle."""
        ...


class Reader(Protocol):
    """One scheduler, as its room reads it (the room's per-rank state lives here)."""

    @property
    def censuses(self) -> Sequence[Census]: ...

    @property
    def idle_check_strict(self) -> bool | None:
        """Whether the engine's own idle check kills it (None: it has none)."""
        ...

    def read(self, reading: Reading, ask: ReadAsk) -> EngineSample: ...

    def identify(self, reading: Reading, role: Role) -> WorkerId:
        """Who the rank is (the worker name from ``POOLWATCH_WORKER`` and the like, its ranks,
        model, engine and release); read once per role and cached by the probe."""
        ...

    def local_index(self, reading: Reading) -> int:
        """Its index on the node (for ``POOLWATCH_PROBE_PORT_BASE``)."""
        ...


Opener = Callable[[object, ProbeConfig, Release, Mapping[str, str]], Reader]


def _probe_consent(environ: Mapping[str, str]) -> bool:
    return environ.get("POOLWATCH_PROBE", "") == "1"


@dataclass(frozen=True, slots=True)
class Engine:
    """One engine room's spec (see the module docstring).  ``open`` may import the room's heavier
    modules lazily, and ``probe`` is a name: the spec itself is imported at activation, in every
    process, and a probe is built from it by :func:`~poolwatch.probe.core.probe.new_probe`."""

    name: str  # the ``engine`` label; :mod:`poolwatch.engines` lists it under this name
    scheduler: str  # ``module:Class`` of the scheduler class to wrap
    hooks: tuple[Hook, ...]
    release: Callable[[str], Release]  # the release to read, given an override ("" = installed)
    open: Opener  # the one factory: a Reader on one scheduler
    probe: str = ""  # ``module:Class`` of the room's Probe subclass ("": the neutral Probe)
    plugin_group: str = ""  # the engine's plugin entry-point group (its ``*_plugin`` function)
    keepalive: bool = False  # its scheduler calls no hook while idle: re-stamp the idle snapshot
    release_env: str = ""  # the deprecated per-engine release variable (POOLWATCH_ENGINE_VERSION wins)
    consent: Callable[[Mapping[str, str]], bool] = field(default=_probe_consent)  # the plugin acts only then
    logger: str = ""  # the engine's own logger, which formats the probe's lines ("": the root logger)
    package: str = ""  # the engine's top-level package, whose frames a call site keeps ("": the scheduler's)
    # how a user gives consent, in their words (``poolwatch doctor`` says it; ``consent`` decides)
    consent_hint: str = "POOLWATCH_PROBE=1"
    # why the engine needs the ``.pth`` file, for the releases that do ("" = it never does)
    pth_needed_by: str = ""
    plugins_env: str = ""  # the variable that restricts which plugins the engine loads ("" = none)

    @property
    def code_package(self) -> str:
        """The package whose frames are the engine's (``sglang``): ``package``, else the top-level
        package of ``scheduler``."""
        return self.package or self.scheduler.partition(":")[0].partition(".")[0]
