"""How ``poolwatch replay`` writes a replay: an aligned text table or one streamed JSON document,
rows as they come and the report's summary at the end."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any, TextIO

from poolwatch.sources.logfile.replay import POOLS, UNDATED_DAY, Problem, ReplayReport, Row

__all__ = ["JsonWriter", "TableWriter", "summary"]

_COLUMNS = ("time", "rank", "event", "n", *(p.value for p in POOLS), "running", "waiting", "verdict")
_WIDTHS = (19, 12, 19, 5, 8, 8, 8, 8, 7, 7, 0)


def _time(at: float, dated: bool = True) -> str:
    """Local time of a line; "(no time)" before any stamped line (0.1.x logs carry none); for a log
    without dates the time of day, with the day of the log it falls on past the first."""
    if at <= 0:
        return "(no time)"
    stamp = dt.datetime.fromtimestamp(at)
    if dated:
        return stamp.strftime("%Y-%m-%d %H:%M:%S")
    day = (stamp.date() - UNDATED_DAY).days + 1
    return stamp.strftime("%H:%M:%S") if day == 1 else f"day {day} {stamp:%H:%M:%S}"


class TableWriter:
    """Rows as an aligned text table, written as they come."""

    def __init__(self, out: TextIO, title: str) -> None:
        self._out, self._title = out, title
        self._out.write(_line(_COLUMNS) + "\n")

    def row(self, row: Row) -> None:
        cells = (
            _time(row.at, row.dated),
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
        counts = f"{report.lines} lines, {report.records} records, {report.recognised} recognised"
        w(f"\n{counts}, ranks: {ranks}\n")
        if report.cut_tail:
            w(f"the last line is incomplete ({report.cut_tail} bytes without a newline) and was not read\n")
        if report.damaged:
            unread = f", {report.damaged_unread} naming no rank (not read)" if report.damaged_unread else ""
            w(f"{report.damaged} batch line(s) with a damaged start, read by their fields{unread}\n")
        if report.incidents:
            w("incidents: " + ", ".join(f"{k} x{n}" for k, n in sorted(report.incidents.items())) + "\n")
        w(summary(report, self._title) + "\n")


def summary(report: ReplayReport, title: str) -> str:
    """The last line of the report: the first provable fault, or why the run is (not) clean."""
    first = report.first_problem
    if first is not None:
        what = first.verdict or first.message
        return f"first problem: {_time(first.at, first.dated)} {first.rank} ({first.event}): {what}"
    if report.problem:
        return "the scheduler crashed (see above)"
    if not report.recognised:
        return f"recognised nothing: no line in a known {title} format"
    return "no accounting problem found"


def _line(cells: tuple[str, ...]) -> str:
    return "  ".join(c.ljust(w) if w else c for c, w in zip(cells, _WIDTHS, strict=True)).rstrip()


def _opt(value: int | None) -> str:
    return "" if value is None else str(value)


class JsonWriter:
    """One JSON document, streamed: the timeline rows are written as they come."""

    def __init__(self, out: TextIO, path: Path, engine: str) -> None:
        self._out = out
        self._count = 0
        out.write(
            '{"file": ' + json.dumps(str(path)) + ', "engine": ' + json.dumps(engine) + ', "timeline": ['
        )

    def row(self, row: Row) -> None:
        doc: dict[str, Any] = {
            "at": row.at if row.dated else None,
            **({} if row.dated else {"time_of_day": _time(row.at, dated=False)}),
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
            "recognised": report.recognised,
            "split_records": report.split_records,
            "damaged_batch_lines": report.damaged,
            "damaged_unread": report.damaged_unread,
            "cut_tail_bytes": report.cut_tail,
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
    at: dict[str, Any] = {"at": p.at} if p.dated else {"at": None, "time_of_day": _time(p.at, dated=False)}
    return {**at, "rank": p.rank, "event": p.event, "verdict": p.verdict, "message": p.message}
