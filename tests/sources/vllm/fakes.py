"""Shared helpers of the vLLM sources tests: the fixture folders, vLLM's dialect over lines or a file."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from pathlib import Path

from tests.helpers import FIXTURES
from tests.sources.logs import file_lines, records

from poolwatch.sources.logfile.events import LogEvent
from poolwatch.sources.logfile.records import LogRecord
from poolwatch.sources.vllm.log.dialect import DIALECT

LOGS = FIXTURES / "vllm-logs"
PAGES = FIXTURES / "vllm"
DAY = dt.date(2026, 12, 3)  # the day the fixtures are read on (vLLM's stamps carry no year)


def local(stamp: str) -> float:
    """Unix seconds of a local ``YYYY-MM-DD HH:MM:SS``."""
    return dt.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").timestamp()


def assemble(lines: Iterable[str], day: dt.date = DAY) -> list[LogRecord]:
    return records(DIALECT, lines, day)


def file_records(path: Path, day: dt.date = DAY) -> list[LogRecord]:
    return assemble(file_lines(path), day)


def file_events(path: Path, day: dt.date = DAY) -> list[LogEvent]:
    return [e for r in file_records(path, day) for e in DIALECT.interpret(r)]
