"""Replay a saved engine log (any registered engine's, told by its lines or ``--engine``): pool
usage per rank over time, every pool error the engine named, and the first provable accounting fault.

Whose log it is, is told by each engine's own marks over the first lines (a vLLM process tag or line
prefix, an SGLang rank prefix or batch line: one line is enough); the output says what decided it.
The line assembler's work (collectors' prefixes taken off, wrapped and split lines joined, progress
bars dropped) is said in the summary too.

Exit codes (also in the README):

* ``0`` healthy: the engine's lines were recognised and none proves a fault;
* ``1`` a fault: the engine reported a leak or failed a check, a figure proves an imbalance, or the
  scheduler crashed;
* ``2`` usage error: a bad option, or a file that cannot be opened;
* ``3`` nothing recognised: empty, binary or no line of the engine's at all (a summary says so);
* ``141`` the reader of the output went away (``poolwatch replay x.log | head``): replay stops
  quietly, as other Unix tools killed by SIGPIPE do.

gzip, bzip2 and xz logs are read as they are (recognised by their first bytes).  A progress line
is drawn on stderr only when stderr is a terminal.

A log that gives only the time of day (0.2.x's ``[16:43:29 TP0]``) is shown with its times of
day (``day 2 00:00:04`` once it passes midnight), never with a date it does not hold (neither
today's nor the file's); its JSON rows carry ``"at": null`` and ``time_of_day``.  Batch lines
whose start was damaged are read by their items and counted on a line of their own.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from poolwatch.commands.replay.writers import JsonWriter, TableWriter, Told
from poolwatch.engines import DEFAULT_ENGINE, engine_entry
from poolwatch.sources.engine import (
    EngineSources,
    LogReplayer,
    engine_sources,
    sniff_engine,
    sources_of,
    weigh_engines,
)
from poolwatch.sources.logfile.evidence import Evidence
from poolwatch.sources.logfile.reader import LogReader, UnreadableLog
from poolwatch.sources.logfile.replay import ReplayReport

__all__ = [
    "EXIT_CLOSED_PIPE",
    "EXIT_FAULT",
    "EXIT_HEALTHY",
    "EXIT_UNRECOGNISED",
    "EXIT_USAGE",
    "add_arguments",
    "run",
]

EXIT_HEALTHY, EXIT_FAULT, EXIT_USAGE, EXIT_UNRECOGNISED, EXIT_CLOSED_PIPE = 0, 1, 2, 3, 141
SNIFF_LINES = 2000  # the first lines that tell whose log it is (--engine auto)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "logfile", help="an engine's server log, plain or gzip/bzip2/xz (any size; read as a stream)"
    )
    parser.add_argument(
        "--engine",
        choices=("auto", *(room.engine for room in engine_sources() if room.log_dialect is not None)),
        default="auto",
        help=f"whose log it is (auto: told by its first lines' marks; {DEFAULT_ENGINE} when no line has any)",
    )
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
    try:
        code = _run(args, sys.stdout, sys.stderr)
        sys.stdout.flush()  # inside the try: a reader gone before the last write is EPIPE too
        return code
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_CLOSED_PIPE


def _run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    path = Path(args.logfile)
    if args.every < 0 or args.every != args.every:
        print("poolwatch replay: --every must be a number >= 0", file=err)
        return EXIT_USAGE
    if not path.is_file():
        print(f"poolwatch replay: {path}: not a readable file", file=err)
        return EXIT_USAGE
    room, evidence = _whose(path, args.engine)
    told = _told(room, evidence, args.engine)
    writer = JsonWriter(out, path, room.engine, told) if args.json else TableWriter(out, _title(room), told)
    replayer = room.replayer(args.worker or path.name, writer.row, args.every, None)  # no day: see above
    try:
        reader = stream_file(path, replayer, _progress(path, err))
    except UnreadableLog as exc:
        print(f"poolwatch replay: {path}: recognised nothing: {exc}", file=err)
        return EXIT_UNRECOGNISED
    except BrokenPipeError:
        raise  # the output's reader went away: run() ends quietly
    except OSError as exc:
        print(f"poolwatch replay: {path}: {exc.strerror or exc}", file=err)
        return EXIT_USAGE
    report = replayer.finish()
    report.cut_tail = reader.cut_tail
    report.marked = evidence.strong if evidence is not None and evidence.engine == room.engine else 0
    writer.close(report)
    if not report.recognised and not report.marked:
        why = "binary data, not a text log" if reader.binary else f"no line in a known {_title(room)} format"
        print(f"poolwatch replay: {path}: recognised nothing: {why}", file=err)
    return exit_code(report)


def _whose(path: Path, asked: str) -> tuple[EngineSources, Evidence | None]:
    """The engine to read ``path`` as (``asked``, else told by its lines, else the default) and the
    evidence its own marks give over the first :data:`SNIFF_LINES` lines (``None``: none carries any)."""
    try:
        head = _head(path)
    except (UnreadableLog, OSError):
        head = []  # reading it again below says what is wrong with it
    if asked == "auto":
        found = sniff_engine(head)
        return found if found is not None else (sources_of(DEFAULT_ENGINE), None)
    room = sources_of(asked)
    evidence = next((e for r, e in weigh_engines(head) if r.engine == room.engine), None)
    return room, evidence if evidence is not None and (evidence.strong or evidence.weak) else None


def whose_log(path: Path) -> EngineSources:
    """The engine whose own marks most of the file's first :data:`SNIFF_LINES` lines carry (the
    default engine when none carries any engine's)."""
    return _whose(path, "auto")[0]


def _head(path: Path) -> list[str]:
    head: list[str] = []
    for lines in LogReader(path).chunks():
        head += lines
        if len(head) >= SNIFF_LINES:
            break
    return head[:SNIFF_LINES]


def _told(room: EngineSources, evidence: Evidence | None, asked: str) -> Told:
    """How the engine was chosen, for the report."""
    if asked != "auto":
        said = (
            f"; {evidence.describe().partition(', ')[2]}"
            if evidence is not None
            else "; no line carries its marks"
        )
        return Told(_title(room), "--engine", f"{_title(room)} (--engine {asked}){said}", evidence)
    if evidence is None:
        return Told(
            _title(room), "default", f"{_title(room)} (no line carries any engine's marks: the default)"
        )
    return Told(_title(room), "marks", evidence.describe().replace(room.engine, _title(room), 1), evidence)


def _title(room: EngineSources) -> str:
    return engine_entry(room.engine).title


def exit_code(report: ReplayReport) -> int:
    """1 on a fault; 0 when the engine's lines were read (or its own marks seen) and prove none."""
    if report.problem:
        return EXIT_FAULT
    return EXIT_HEALTHY if report.recognised or report.marked else EXIT_UNRECOGNISED


def stream_file(path: Path, replayer: LogReplayer, progress: Callable[[int], None]) -> LogReader:
    """Feed the file's complete lines to ``replayer`` a chunk at a time (see :class:`LogReader`)."""
    reader = LogReader(path)
    for lines in reader.chunks():
        replayer.feed(lines)
        progress(reader.position)
    progress(path.stat().st_size)
    return reader


def _silence_stdout() -> None:
    """After EPIPE, point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


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
