"""Replay a saved SGLang log: pool usage per rank over time and the first provable accounting fault."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from poolwatch.errors import Reason, ScrapeError
from poolwatch.sources.sglang_log.replay import POOLS, Problem, Replayer, ReplayReport, Row
from poolwatch.sources.sglang_log.tail import LogTail

__all__ = ["add_arguments", "run"]

CHUNK = 1 << 20
_COLUMNS = ("time", "rank", "event", "n", *(p.value for p in POOLS), "running", "waiting", "verdict")
_WIDTHS = (19, 12, 19, 5, 8, 8, 8, 8, 7, 7, 0)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("logfile", help="an SGLang server log (any size; read as a stream)")
    parser.add_argument("--json", action="store_true", help="one JSON document instead of a table")
    parser.add_argument(
        "--every",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="summarise batch lines per rank over windows of this many seconds (0: every line)",
    )
    parser.add_argument("--worker", default="", help="worker name in the report (default: the file name)")


def run(args: argparse.Namespace) -> int:
    path = Path(args.logfile)
    if args.every < 0 or args.every != args.every:
        print("poolwatch replay: --every must be a number >= 0", file=sys.stderr)
        return 2
    if not path.is_file():
        print(f"poolwatch replay: {path}: not a readable file", file=sys.stderr)
        return 2
    out: TextIO = sys.stdout
    writer = JsonWriter(out, path) if args.json else TableWriter(out)
    replayer = Replayer(args.worker or path.name, writer.row, args.every)
    try:
        stream_file(path, replayer, _progress(path, sys.stderr))
    except ScrapeError as exc:
        print(f"poolwatch replay: {exc}", file=sys.stderr)
        return 2
    report = replayer.finish()
    writer.close(report)
    return 1 if report.problem else 0


def stream_file(path: Path, replayer: Replayer, progress: Callable[[int], None]) -> None:
    """Feed the file to ``replayer`` a chunk at a time (huge lines cut, bad bytes replaced)."""
    if not path.is_file():
        raise ScrapeError(Reason.IO, f"{path}: not a readable file")
    tail = LogTail(path, backfill=path.stat().st_size + 1, max_read=CHUNK)
    try:
        while True:
            read = tail.read()
            replayer.feed(read.lines)
            progress(tail.position)
            if not read.more:
                break
        replayer.feed(tail.finish())
    finally:
        tail.close()


def _progress(path: Path, err: TextIO) -> Callable[[int], None]:
    """A progress line on stderr when it is a terminal; nothing otherwise."""
    if not err.isatty():
        return lambda _: None
    total = max(path.stat().st_size, 1) if path.is_file() else 1
    last = [0.0]

    def show(done: int) -> None:
        now = time.monotonic()
        if now - last[0] >= 0.2 or done >= total:
            last[0] = now
            err.write(f"\rreplay: {100 * done / total:5.1f}% of {total / 1e6:.1f} MB")
            if done >= total:
                err.write("\n")
            err.flush()

    return show


def _time(at: float) -> str:
    return dt.datetime.fromtimestamp(at).strftime("%Y-%m-%d %H:%M:%S")


class TableWriter:
    """Rows as an aligned text table, written as they come."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._out.write(_line(_COLUMNS) + "\n")

    def row(self, row: Row) -> None:
        cells = (
            _time(row.at),
            row.rank,
            row.event,
            str(row.batches or ""),
            *(row.figures.get(p, "") for p in POOLS),
            _opt(row.running),
            _opt(row.waiting),
            row.verdict,
        )
        self._out.write(_line(cells) + "\n")

    def close(self, report: ReplayReport) -> None:
        w = self._out.write
        ranks = ", ".join(sorted(report.ranks)) or "-"
        w(f"\n{report.lines} lines, {report.records} records, ranks: {ranks}\n")
        if report.incidents:
            w("incidents: " + ", ".join(f"{k} x{n}" for k, n in sorted(report.incidents.items())) + "\n")
        w(summary(report) + "\n")


def summary(report: ReplayReport) -> str:
    """The last line of the report: the first provable fault, or why the run is (not) clean."""
    first = report.first_problem
    if first is not None:
        what = first.verdict or first.message
        return f"first problem: {_time(first.at)} {first.rank} ({first.event}): {what}"
    return "the scheduler crashed (see above)" if report.problem else "no accounting problem found"


def _line(cells: tuple[str, ...]) -> str:
    return "  ".join(c.ljust(w) if w else c for c, w in zip(cells, _WIDTHS, strict=True)).rstrip()


def _opt(value: int | None) -> str:
    return "" if value is None else str(value)


class JsonWriter:
    """One JSON document, streamed: the timeline rows are written as they come."""

    def __init__(self, out: TextIO, path: Path) -> None:
        self._out = out
        self._count = 0
        out.write('{"file": ' + json.dumps(str(path)) + ', "timeline": [')

    def row(self, row: Row) -> None:
        doc = {
            "at": row.at,
            "rank": row.rank,
            "event": row.event,
            "batches": row.batches,
            "figures": {p.value: v for p, v in row.figures.items()},
            "running": row.running,
            "waiting": row.waiting,
            "verdict": row.verdict,
        }
        self._out.write(("," if self._count else "") + "\n  " + json.dumps(doc))
        self._count += 1

    def close(self, report: ReplayReport) -> None:
        tail: dict[str, Any] = {
            "lines": report.lines,
            "records": report.records,
            "dropped_lines": report.dropped_lines,
            "ranks": sorted(report.ranks),
            "incidents": report.incidents,
            "first_problem": _problem(report.first_problem),
            "problem": report.problem,
        }
        body = json.dumps(tail)[1:-1]
        self._out.write("\n], " + body + "}\n")


def _problem(p: Problem | None) -> dict[str, Any] | None:
    if p is None:
        return None
    return {"at": p.at, "rank": p.rank, "event": p.event, "verdict": p.verdict, "message": p.message}
