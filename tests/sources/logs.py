"""Shared helpers of the log tests: an engine's dialect driven over lines, as the product drives it
(the line assembler, then records (:func:`rigs.log_records.records`), then the dialect's events,
the fold, the replayer)."""

from __future__ import annotations

import argparse
import datetime as dt
from collections.abc import Iterable
from pathlib import Path

import httpx
import pytest

from poolwatch.commands.replay import command as replay_command
from poolwatch.model.snapshot import Snapshot
from poolwatch.sources.base import Source
from poolwatch.sources.logfile.dialect import LogDialect
from poolwatch.sources.logfile.events import LogEvent
from poolwatch.sources.logfile.reader import LogReader
from poolwatch.sources.logfile.replay import ReplayReport, Row
from poolwatch.sources.logfile.replayer import Replayer
from rigs.log_records import records


def events(dialect: LogDialect, lines: Iterable[str], day: dt.date | None = None) -> list[LogEvent]:
    return [e for r in records(dialect, lines, day) for e in dialect.interpret(r)]


def file_lines(path: Path) -> list[str]:
    return [line for chunk in LogReader(path).chunks() for line in chunk]


def replayed(
    dialect: LogDialect, lines: Iterable[str], *, every: float = 0, day: dt.date | None = None
) -> tuple[ReplayReport, list[Row]]:
    rows: list[Row] = []
    replayer = Replayer(dialect, "w", rows.append, every=every, day=day)
    replayer.feed(lines)
    return replayer.finish(), rows


async def drain(source: Source, client: httpx.AsyncClient) -> list[Snapshot]:
    """Everything a log source says until the file is worked off and the log has gone quiet."""
    return await source.scrape(client) + await source.scrape(client)


def replay_cli(capsys: pytest.CaptureFixture[str], path: Path, *extra: str) -> tuple[int, str, str]:
    """``poolwatch replay --every 0 PATH [extra]``: its exit code, stdout and stderr."""
    parser = argparse.ArgumentParser()
    replay_command.add_arguments(parser)
    code = replay_command.run(parser.parse_args([str(path), "--every", "0", *extra]))
    out, err = capsys.readouterr()
    return code, out, err
