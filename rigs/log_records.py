"""The records an engine's log dialect makes of lines, as the product's log source assembles them
(the line assembler, then the record assembler): what the log tests and the emulated deployment of
:mod:`rigs.emulated.watched` read a log with."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from poolwatch.sources.logfile.assembler import LineAssembler
from poolwatch.sources.logfile.dialect import LogDialect
from poolwatch.sources.logfile.records import LogRecord, RecordAssembler


def records(
    dialect: LogDialect,
    lines: Iterable[str],
    day: dt.date | None = None,
    *,
    final: bool = True,
    **bounds: int,
) -> list[LogRecord]:
    """The records ``lines`` make (``final``: the input ends here; else a live log gone quiet)."""
    assembler = LineAssembler(dialect.reader(day), dialect.wraps, dialect.unglue, dialect.own_lead)
    grouped = RecordAssembler(dialect.framing, **bounds)
    out: list[LogRecord] = []
    for line in lines:
        for logical in assembler.feed(line):
            out += grouped.feed(logical.text, logical.head)
    for logical in assembler.flush():
        out += grouped.feed(logical.text, logical.head)
    return out + grouped.flush(final=final)
