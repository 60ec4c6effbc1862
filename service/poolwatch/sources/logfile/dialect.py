"""An engine's log dialect: everything about its log that is its own, in one object.

The log pipeline is engine-neutral (:mod:`poolwatch.sources.logfile`): reading and following the file,
taking collectors' prefixes off and joining wrapped lines (the line assembler), grouping lines into
records, folding events into snapshots, the replay timeline, the live source.  What differs between
engines is the *dialect*, which an engine's sources room hands over as one :class:`LogDialect`:

* what its lines look like: ``reader`` (its prefix: time, writer, ranks, level, source file),
  ``wraps`` (the figures a wrapped piece carries), ``unglue`` (two lines printed as one),
  ``framing`` (how its messages span lines: :class:`~poolwatch.sources.logfile.records.Framing`);
* its records: ``interpret`` (a record's events, :mod:`~poolwatch.sources.logfile.events`);
* its marks: ``marks`` (what in a line is unmistakably this engine's, for telling whose log a file
  is) and its incident markers, anchored to the engine's own logger position inside ``interpret``.

A third engine's log is its room's dialect module and one :class:`LogDialect`; no neutral file changes.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from poolwatch.model.rank import SourceKind
from poolwatch.sources.logfile.assembler import Wraps
from poolwatch.sources.logfile.events import LogEvent
from poolwatch.sources.logfile.heads import HeadReader
from poolwatch.sources.logfile.records import Framing, LogRecord

__all__ = ["LogDialect", "Mark"]


@dataclass(frozen=True, slots=True)
class Mark:
    """What in one line shows whose log it is."""

    what: str  # "vLLM's line prefix", "an SGLang batch line", ...
    strong: bool = True  # False: a shape another program could also write (a bare time prefix)


def _whole(text: str) -> list[str]:
    return [text]


@dataclass(frozen=True, slots=True)
class LogDialect:
    """One engine's log, as the neutral pipeline needs to know it (see the module docstring)."""

    engine: str  # the registry's name (poolwatch.engines)
    reader: Callable[[dt.date | None], HeadReader]  # a fresh prefix reader; the day dates stamps without one
    interpret: Callable[[LogRecord], list[LogEvent]]
    marks: Callable[[str], Mark | None]  # on a line without collectors' prefixes
    wraps: Wraps
    framing: Framing = field(default_factory=Framing)
    unglue: Callable[[str], list[str]] = _whole
    holders: str = "ranks"  # what one rank of its log is called, in the rank cap's warning
    stall_bugs: tuple[str, ...] = ()  # bug-zoo ids a stall on this engine may be
    # the start of its own prefix when that begins like a collector's (an RFC 3339 time): kept, not
    # stripped (:func:`~poolwatch.sources.logfile.prefixes.strip`); None: its prefix never does
    own_lead: re.Pattern[str] | None = None

    @property
    def source(self) -> SourceKind:
        """The kind of a target that is this engine's log (``<engine>-log``)."""
        return SourceKind.of(self.engine, "log")
