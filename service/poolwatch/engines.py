"""The engines poolwatch watches: one entry per engine, naming its rooms.  Stdlib only.

An engine's *rooms* are the folders named after it: ``poolwatch/probe/<engine>/`` (what the probe
reads inside the engine's scheduler) and, when the engine has its own ``/metrics`` or log worth
reading without a probe, ``poolwatch/sources/<engine>/``.  This table is the one place that lists
them; everything engine-neutral finds a room through it, by import path, loaded only when asked
(an SGLang scheduler process never imports the vLLM room, and the sidecar never imports a probe
room).  So neutral code never names an engine, and a third engine is its room folders plus one
entry here (and, for activation inside the engine, its plugin entry point in ``pyproject.toml``).

``tests/test_engines.py`` checks that every entry resolves and every room folder has an entry.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CHANNELS",
    "DEFAULT_ENGINE",
    "ENGINES",
    "EngineEntry",
    "UnknownEngine",
    "engine_entry",
    "engine_names",
    "load",
    "probed_engines",
    "read_engine",
    "read_engines",
]


CHANNELS = ("metrics", "log")  # an engine's own faces poolwatch can read, in the order targets list them


class UnknownEngine(ValueError):
    """An engine name no entry has; the message lists the known ones."""


@dataclass(frozen=True, slots=True)
class EngineEntry:
    name: str  # the ``engine`` label of every snapshot and metric, and ``POOLWATCH_ENGINE``'s value
    title: str  # how people write it ("SGLang", "vLLM")
    # ``module:ATTR`` of the probe room's :class:`~poolwatch.probe.core.engine.Engine` ("" = none: an
    # engine poolwatch reads from outside only, through its sources room)
    probe: str = ""
    sources: str = ""  # ``module:ATTR`` of the sources room's ``EngineSources`` ("" = none)
    # its own faces the sidecar reads without a probe, through that room: its ``/metrics`` dialect
    # ("metrics") and its log dialect ("log"); () for a probe-only engine.  Target kinds are named
    # after them (``<name>-metrics``, ``<name>-log``: :attr:`source_kinds`)
    channels: tuple[str, ...] = ()
    # ``module:function`` returning the Markdown table of the releases the probe reads, generated
    # into ``docs/engines/<name>.md`` from the same data the probe consults ("" = none)
    releases: str = ""
    # what one unit of its pools is called in a page ("slot": SGLang's token/state slots, "block": vLLM's
    # KV blocks); neutral code words its texts from this, never from the engine's name
    unit: str = "slot"
    # whether the engine checks its own pools when idle and dies on an imbalance (SGLang's strict idle
    # check): a leak on such an engine is a crash to come; on one without, the capacity is only lost
    idle_check: bool = False

    def __post_init__(self) -> None:
        if not self.probe and not self.sources:
            raise ValueError(f"engine {self.name!r}: a probe room, a sources room or both")
        if bool(self.sources) != bool(self.channels):
            raise ValueError(f"engine {self.name!r}: a sources room and its channels go together")
        unknown = set(self.channels) - set(CHANNELS)
        if unknown or (self.channels and "log" not in self.channels):
            raise ValueError(f"engine {self.name!r}: channels are 'log' and, optionally, 'metrics'")

    @property
    def source_kinds(self) -> tuple[str, ...]:
        """The kinds of target its sources room reads (``poolwatch.model.rank.SourceKind`` values)."""
        return tuple(f"{self.name}-{c}" for c in CHANNELS if c in self.channels)


ENGINES: tuple[EngineEntry, ...] = (
    EngineEntry(
        "sglang",
        "SGLang",
        probe="poolwatch.probe.sglang.engine:SGLANG",
        sources="poolwatch.sources.sglang.engine:SOURCES",
        channels=("metrics", "log"),
        releases="poolwatch.probe.sglang.release_table:markdown",
        unit="slot",
        idle_check=True,
    ),
    EngineEntry(
        "vllm",
        "vLLM",
        probe="poolwatch.probe.vllm.engine:VLLM",
        sources="poolwatch.sources.vllm.engine:SOURCES",
        channels=("metrics", "log"),
        releases="poolwatch.probe.vllm.release_table:markdown",
        unit="block",
        idle_check=False,
    ),
)
DEFAULT_ENGINE = "sglang"  # what a sidecar reads ``--metrics-urls`` and ``--log-paths`` as, unless told


def engine_names(entries: tuple[EngineEntry, ...] = ENGINES) -> tuple[str, ...]:
    return tuple(e.name for e in entries)


def probed_engines(entries: tuple[EngineEntry, ...] = ENGINES) -> tuple[str, ...]:
    """The engines with a probe room (what ``POOLWATCH_PROBE=1`` activates, what doctor's engine side
    checks)."""
    return tuple(e.name for e in entries if e.probe)


def read_engines(entries: tuple[EngineEntry, ...] = ENGINES) -> tuple[str, ...]:
    """The engines whose own ``/metrics`` or log the sidecar can read (those with a sources room)."""
    return tuple(e.name for e in entries if e.channels)


def read_engine(name: str, entries: tuple[EngineEntry, ...] = ENGINES) -> EngineEntry:
    """The entry of ``name``, an engine whose own ``/metrics`` or log the sidecar reads
    (``POOLWATCH_ENGINE``); :class:`UnknownEngine` says why not, and which engines are."""
    readable = ", ".join(read_engines(entries))
    entry = next((e for e in entries if e.name == name), None)
    if entry is None:
        raise UnknownEngine(f"expected one of {readable}, got {name!r}")
    if not entry.channels:
        raise UnknownEngine(
            f"{name!r} has no /metrics or log poolwatch reads: its ranks are read by its probe only "
            f"(they announce themselves in POOLWATCH_PROBE_DIR, or list them in POOLWATCH_PROBE_URLS); "
            f"expected one of {readable}"
        )
    return entry


def engine_entry(name: str, entries: tuple[EngineEntry, ...] = ENGINES) -> EngineEntry:
    """The entry of ``name``; :class:`UnknownEngine` names the known engines."""
    for entry in entries:
        if entry.name == name:
            return entry
    raise UnknownEngine(f"unknown engine {name!r} (known: {', '.join(engine_names(entries))})")


def load(path: str) -> Any:
    """The object a ``module:ATTR`` path names (its module imported now)."""
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)
