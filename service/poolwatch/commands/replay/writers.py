"""How ``poolwatch replay`` writes a replay: an aligned text table or one streamed JSON document,
rows as they come and the report's summary at the end: whose log it was and why, what the line
assembler joined, split and dropped, the pool errors the engine named, and the first problem."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from poolwatch.sources.logfile.assembler import AssemblyStats
from poolwatch.sources.logfile.events import PoolError
from poolwatch.sources.logfile.evidence import Evidence
from poolwatch.sources.logfile.replay import POOLS, UNDATED_DAY, Problem, ReplayReport, Row

__all__ = ["JsonWriter", "TableWriter", "Told", "summary"]

_COLUMNS = ("time", "rank", "event", "n", *(p.value for p in POOLS), "running", "waiting", "verdict")
_WIDTHS = (19, 12, 19, 5, 8, 8, 8, 8, 7, 7, 0)


@dataclass(frozen=True, slots=True)
class Told:
    """Whose log it is and how that was decided."""

    title: str  # "SGLang", "vLLM"
    how: str  # "marks", "--engine", "default"
    text: str  # one line for people
    evidence: Evidence | None = None


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

    def __init__(self, out: TextIO, title: str, told: Told | None = None) -> None:
        self._out, self._title = out, title
        self._told = told
        self._out.write(_line(_COLUMNS) + "\n")

    def row(self, row: Row) -> None:
        verdict = row.verdict
        if row.error is not None:
            verdict = f"{verdict} [{row.error.describe()}]" if verdict else f"[{row.error.describe()}]"
        cells = (
            _time(row.at, row.dated),
            row.rank,
            row.event,
            str(row.batches or ""),
            *(row.figures.get(p, "") for p in POOLS),
            _opt(row.running),
            _opt(row.waiting),
            verdict,
        )
        self._out.write(_line(cells) + "\n")

    def close(self, report: ReplayReport) -> None:
        w = self._out.write
        ranks = ", ".join(sorted(report.ranks)) or "-"
        counts = f"{report.lines} lines, {report.records} records, {report.recognised} recognised"
        w(f"\n{counts}, ranks: {ranks}\n")
        if self._told is not None:
            w(f"engine: {self._told.text}\n")
        assembled = _assembly_line(report.assembly)
        if assembled:
            w(f"lines: {assembled}\n")
        if report.cut_tail:
            w(f"the last line is incomplete ({report.cut_tail} bytes without a newline) and was not read\n")
        if report.damaged:
            unread = f", {report.damaged_unread} naming no rank (not read)" if report.damaged_unread else ""
            w(f"{report.damaged} batch line(s) with a damaged start, read by their fields{unread}\n")
        if report.incidents:
            w("incidents: " + ", ".join(f"{k} x{n}" for k, n in sorted(report.incidents.items())) + "\n")
        if report.errors:
            w("pool errors named: " + ", ".join(f"{k} x{n}" for k, n in sorted(report.errors.items())) + "\n")
        w(summary(report, self._title) + "\n")


def summary(report: ReplayReport, title: str) -> str:
    """The last line of the report: the first provable fault, or why the run is (not) clean."""
    first = report.first_problem
    if first is not None:
        what = " \u2014 ".join(p for p in (first.verdict, first.error) if p)
        if first.message and not first.verdict:
            what = f"{what} \u2014 {first.message}" if what else first.message
        return f"first problem: {_time(first.at, first.dated)} {first.rank} ({first.event}): {what}"
    if report.problem:
        return "the scheduler crashed (see above)"
    if not report.recognised and not report.marked:
        return f"recognised nothing: no line in a known {title} format"
    if not report.recognised:
        marked = f"{report.marked} lines carry {title}'s own marks"
        return f"no accounting problem found: {marked}, none speaks of its pools"
    if report.errors:
        return "no accounting fault proven (the pool errors named above prove none on their own)"
    return "no accounting problem found"


def _assembly_line(stats: AssemblyStats) -> str:
    """What the line assembler did, in one line ("" when it changed nothing)."""
    parts = []
    if stats.stripped:
        parts.append(
            "prefixes taken off: " + ", ".join(f"{k} x{n}" for k, n in sorted(stats.stripped.items()))
        )
    if stats.rejoined:
        parts.append("joined: " + ", ".join(f"{k} x{n}" for k, n in sorted(stats.rejoined.items())))
    if stats.unglued:
        parts.append(f"split: {stats.unglued} line(s) holding several")
    if stats.dropped:
        parts.append("dropped: " + ", ".join(f"{k} x{n}" for k, n in sorted(stats.dropped.items())))
    return "; ".join(parts)


def _line(cells: tuple[str, ...]) -> str:
    return "  ".join(c.ljust(w) if w else c for c, w in zip(cells, _WIDTHS, strict=True)).rstrip()


def _opt(value: int | None) -> str:
    return "" if value is None else str(value)


class JsonWriter:
    """One JSON document, streamed: the timeline rows are written as they come."""

    def __init__(self, out: TextIO, path: Path, engine: str, told: Told | None = None) -> None:
        self._out = out
        self._count = 0
        evidence = json.dumps(_evidence(told)) if told is not None else "null"
        out.write(
            '{"file": '
            + json.dumps(str(path))
            + ', "engine": '
            + json.dumps(engine)
            + ', "engine_evidence": '
            + evidence
            + ', "timeline": ['
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
            "error": _error(row.error),
        }
        self._out.write(("," if self._count else "") + "\n  " + json.dumps(doc))
        self._count += 1

    def close(self, report: ReplayReport) -> None:
        a = report.assembly
        tail: dict[str, Any] = {
            "lines": report.lines,
            "records": report.records,
            "recognised": report.recognised,
            "split_records": report.split_records,
            "damaged_batch_lines": report.damaged,
            "damaged_unread": report.damaged_unread,
            "cut_tail_bytes": report.cut_tail,
            "assembly": {
                "prefixes": dict(a.stripped),
                "joined": dict(a.rejoined),
                "unglued": a.unglued,
                "dropped": dict(a.dropped),
            },
            "ranks": sorted(report.ranks),
            "incidents": report.incidents,
            "pool_errors": report.errors,
            "first_problem": _problem(report.first_problem),
            "problem": report.problem,
        }
        body = json.dumps(tail)[1:-1]
        self._out.write("\n], " + body + "}\n")


def _evidence(told: Told) -> dict[str, Any]:
    e = told.evidence
    doc: dict[str, Any] = {"told_by": told.how, "text": told.text}
    if e is not None:
        first = {"line": e.first[0], "text": e.first[1]} if e.first else None
        doc |= {"lines": e.lines, "strong": e.strong, "weak": e.weak, "marks": dict(e.kinds), "first": first}
        doc["others"] = e.others
    return doc


def _error(error: PoolError | None) -> dict[str, Any] | None:
    if error is None:
        return None
    pool = error.pool.value if error.pool is not None else None
    return {
        "class": error.cls.value,
        "pool": pool,
        "what": error.what,
        "bugs": list(error.bugs),
        "proven": error.proven,
    }


def _problem(p: Problem | None) -> dict[str, Any] | None:
    if p is None:
        return None
    at: dict[str, Any] = {"at": p.at} if p.dated else {"at": None, "time_of_day": _time(p.at, dated=False)}
    return {
        **at,
        "rank": p.rank,
        "event": p.event,
        "verdict": p.verdict,
        "error": p.error,
        "message": p.message,
    }
