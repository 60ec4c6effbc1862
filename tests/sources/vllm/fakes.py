"""Shared helpers of the vLLM sources tests: the fixture folders, a record assembler over a file."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from pathlib import Path

from tests.helpers import FIXTURES

from poolwatch.sources.logfile.reader import LogReader
from poolwatch.sources.vllm.log.events import LogEvent, interpret
from poolwatch.sources.vllm.log.lines import Calendar
from poolwatch.sources.vllm.log.records import LogRecord, RecordAssembler

LOGS = FIXTURES / "vllm-logs"
PAGES = FIXTURES / "vllm"
DAY = dt.date(2026, 12, 3)  # the day the fixtures are read on (vLLM's stamps carry no year)


def local(stamp: str) -> float:
    """Unix seconds of a local ``YYYY-MM-DD HH:MM:SS``."""
    return dt.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").timestamp()


def assemble(lines: Iterable[str], day: dt.date = DAY) -> list[LogRecord]:
    assembler = RecordAssembler(Calendar(day))
    out: list[LogRecord] = []
    for line in lines:
        out += assembler.feed(line)
    return out + assembler.flush()


def file_records(path: Path, day: dt.date = DAY) -> list[LogRecord]:
    return assemble((line for chunk in LogReader(path).chunks() for line in chunk), day)


def file_events(path: Path, day: dt.date = DAY) -> list[LogEvent]:
    return [e for r in file_records(path, day) for e in interpret(r)]
