"""What a vLLM log record says, anchored to the logger position of the process that says it.  Pure.

* ``Engine 000: ... Running: 8 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.1%, ...`` (the API
  server, per engine) -> :class:`~poolwatch.sources.logfile.events.Figures` (statistics, percent);
* ``Initializing a V1 LLM engine (v0.32.0) with config: ...`` (EngineCore, first line) -> a
  :class:`~poolwatch.sources.logfile.events.Start` of that rank; ``GPU KV cache size: 1,048,576
  tokens`` -> a :class:`~poolwatch.sources.logfile.events.Note` (a capacity in tokens, not blocks);
* ``EngineCore encountered a fatal error.`` / ``EngineCore failed to start.`` with the traceback,
  and ``[FT] Busy loop raised AssertionError. Waiting for recovery.`` (0.27+ fault tolerance) -> a
  ``scheduler_exception`` incident, with the pool error its traceback names
  (:func:`~poolwatch.sources.vllm.log.crash.crash_error`);
* the API server's ``EngineDeadError``, ``Engine core proc EngineCore_DP0 died unexpectedly``,
  ``[shutdown] MPClient: engine core exited unexpectedly``, ``Request ... failed (engine dead).`` ->
  :class:`~poolwatch.sources.logfile.events.Dead` (an incident only when EngineCore did not say so);
* warnings that blocks are held for what will never read them -> a note naming a stranded error.

The rank is the process tag's (``EngineCore_3``, ``EngineCore_DP1``:
:func:`~poolwatch.sources.vllm.log.lines.rank_of`), the statistics line's ``Engine 001``, the
fault-tolerance line's ``Engine 1``.  Every marker counts only where vLLM writes it
(:mod:`~poolwatch.sources.vllm.log.formats`): at the start of a message, a crash only from
EngineCore at level ERROR in ``core.py``.
"""

from __future__ import annotations

from poolwatch.model.rank import IncidentKind, Pool
from poolwatch.model.snapshot import Incident
from poolwatch.sources.logfile.dialect import Mark
from poolwatch.sources.logfile.events import (
    Dead,
    ErrorClass,
    Figures,
    LogEvent,
    Note,
    PoolError,
    RankIncident,
    Start,
)
from poolwatch.sources.logfile.heads import Ranks
from poolwatch.sources.logfile.records import LogRecord
from poolwatch.sources.vllm.log.crash import MAX_TEXT, crash_error, crash_text, read_crash
from poolwatch.sources.vllm.log.errors import WARNING_RULES
from poolwatch.sources.vllm.log.formats import (
    CAPACITY,
    CAPACITY_FILES,
    CLIENT_DEAD,
    CLIENT_PROCESSES,
    FATAL,
    FATAL_FILE,
    FATAL_LEVEL,
    FT_BUSY_LOOP,
    FT_FILES,
    FT_NO_RECOVERY,
    FT_STATUS,
    STARTUP,
    STARTUP_FILES,
    STATS_FILES,
)
from poolwatch.sources.vllm.log.lines import VllmReader, rank_of, split_tag
from poolwatch.sources.vllm.log.stats import StatsFigures, parse_stats_line

__all__ = ["interpret", "marks"]

_CRASH = IncidentKind.SCHEDULER_EXCEPTION
_FATAL = tuple(marker for marker, _ in FATAL)
_UNNAMED = PoolError(ErrorClass.COUNTER, "vLLM's own block-pool check failed (an assert of no known shape)")
_FRAME = '  File "'  # a traceback's frame line
_MARKS = VllmReader()  # reads prefixes for :func:`marks` only


def interpret(record: LogRecord) -> list[LogEvent]:
    """The events of one record (most records are none of these and give ``[]``)."""
    if record.headless or not record.attributed:
        return []  # no prefix, no logger position: nothing vLLM says about itself
    message = record.message
    stats = parse_stats_line(message) if record.source_file.endswith(STATS_FILES) else None
    if stats is not None:
        return [_figures(record.at, stats)]
    ranks = record.ranks
    if record.stream.startswith("EngineCore") or (record.stream == "" and ranks is None):
        event = _engine_event(record, message, ranks or Ranks())
        if event is not None:
            return [event]
    if record.stream in CLIENT_PROCESSES:
        dead = _client_dead(record)
        if dead is not None:
            return [dead]
    return _warning(record, message)


def _figures(at: float, stats: StatsFigures) -> Figures:
    usage = {} if stats.usage is None else {Pool.FULL: stats.usage}
    queues = {q: n for q, n in (("running", stats.running), ("waiting", stats.waiting)) if n is not None}
    negative = frozenset({Pool.FULL}) if stats.negative else frozenset()
    ranks = None if stats.engine is None else Ranks(dp=stats.engine)
    return Figures(
        at, ranks, "stats", {}, usage, negative, queues, percent=True, busy=False, throughput=stats.throughput
    )


def _engine_event(record: LogRecord, message: str, ranks: Ranks) -> LogEvent | None:
    where = record.source_file
    if (m := STARTUP.match(message)) is not None and where.endswith(STARTUP_FILES):
        return Start(record.at, ranks, m["release"])
    if (m := CAPACITY.match(message)) is not None and where.endswith(CAPACITY_FILES):
        return Note(record.at, ranks, f"kv {m['tokens']} tokens")
    if message.startswith(_FATAL) and record.level == FATAL_LEVEL and record.source_file == FATAL_FILE:
        crash = read_crash(record.lines)
        error = crash_error(crash) or (_UNNAMED if crash.in_pool else None)
        return RankIncident(ranks, Incident(_CRASH, crash_text(record.lines), record.at), error)
    if message.startswith("[FT] ") and where.endswith(FT_FILES):
        return _ft_event(record, message, ranks)
    return None


def _ft_event(record: LogRecord, message: str, ranks: Ranks) -> LogEvent | None:
    if FT_BUSY_LOOP.match(message) is not None:
        return RankIncident(ranks, Incident(_CRASH, message[:MAX_TEXT], record.at))
    if (m := FT_STATUS.match(message)) is not None:
        return Note(record.at, Ranks(dp=int(m["engine"])), f"ft {m['status'].lower()}")
    if FT_NO_RECOVERY.match(message) is not None:
        return Note(record.at, ranks, "ft no-recovery")
    return None


def _client_dead(record: LogRecord) -> Dead | None:
    for index, line in enumerate(record.lines):
        for pattern, _, files in CLIENT_DEAD:
            if files and (index > 0 or not record.source_file.endswith(files)):
                continue  # a message of its own, from its logger's file
            if not files and not _exception_line(record, index):
                continue  # the EngineDeadError: the exception line that ends a logged traceback
            if (m := pattern.match(line)) is None:
                continue
            named = m.groupdict().get("process")
            text = line if index == 0 else f"{record.message}\n{line}"
            said = f"EngineCore died (seen by the API server): {text}"[:MAX_TEXT]
            return Dead(record.at, rank_of(named) if named else None, said)
    return None


def _exception_line(record: LogRecord, index: int) -> bool:
    """``record.lines[index]`` is the exception line of a traceback the record logged at ERROR: a
    line not indented right after an indented one, a frame (``  File "...", line N``) before it (an
    excerpt may begin inside the traceback, after its head)."""
    lines = record.lines
    if record.level != FATAL_LEVEL or index == 0 or lines[index][:1].isspace():
        return False
    return lines[index - 1][:1].isspace() and any(line.startswith(_FRAME) for line in lines[:index])


def _warning(record: LogRecord, message: str) -> list[LogEvent]:
    for rule in WARNING_RULES:
        if rule.text.match(message) and record.source_file.endswith(rule.files):
            error = PoolError(rule.cls, rule.what, bugs=rule.bugs, proven=rule.proven)
            ranks = record.ranks if record.stream else Ranks()  # untagged: the one engine's
            return [Note(record.at, ranks, rule.name, error)]
    return []


def marks(line: str) -> Mark | None:
    """What in one line (collectors' prefixes already off) shows it is vLLM's."""
    head = _MARKS.read(line)
    if head is not None:
        return Mark("a vLLM process tag" if head.stream else "vLLM's line prefix")
    process, rest = split_tag(line)
    if process is not None and (rank_of(process) is not None or process in ("APIServer", "DPCoordinator")):
        return Mark("a vLLM process tag")
    if parse_stats_line(rest) is not None or rest.startswith(_FATAL) or "EngineDeadError: EngineCore" in rest:
        return Mark("a vLLM engine message")
    return None
