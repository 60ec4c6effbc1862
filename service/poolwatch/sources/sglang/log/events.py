"""What an SGLang log record says, anchored to SGLang's own logger positions.  Pure.

* a batch line or a startup line is a record's message (:mod:`~poolwatch.sources.sglang.log.batch`):
  :class:`~poolwatch.sources.logfile.events.Figures`, :class:`~poolwatch.sources.logfile.events.PoolSize`;
  a log without any prefix (0.1.x) may have them on any line of a headless record;
* a report of SGLang's own checks (:mod:`~poolwatch.sources.sglang.log.leak_message`) is an incident
  with the pool error it names;
* a crash: a message that *starts* with ``Scheduler hit an exception`` (0.4.0+; ``Exception in
  ModelTpServer`` in 0.2.x) is a ``scheduler_exception`` incident, always, whatever follows it, with
  the allocator assert its traceback ends in when one is known.

Only SGLang's own positions count (issue 42's log truth): a marker must begin the message of a
prefixed line, begin the first line of a block with no prefix (Python's own stderr, an excerpt),
or -- for a report -- begin a line of a crash's traceback.  Text a client sends (a request id, a
prompt: printed inside a ``Receive:`` or ``Finish:`` message, one line) never reaches those
positions, so it can neither forge a crash nor a leak.
"""

from __future__ import annotations

from collections.abc import Callable

from poolwatch.model.rank import IncidentKind, Pool
from poolwatch.model.snapshot import Incident
from poolwatch.sources.logfile.dialect import Mark
from poolwatch.sources.logfile.events import LogEvent, Note, PoolError, RankIncident
from poolwatch.sources.logfile.heads import Ranks
from poolwatch.sources.logfile.records import LogRecord
from poolwatch.sources.sglang.log.batch import capacity_of, parse_batch_line
from poolwatch.sources.sglang.log.errors import CRASH_ASSERTS
from poolwatch.sources.sglang.log.formats import CRASH_MARKERS
from poolwatch.sources.sglang.log.leak_message import find_reports, report_at
from poolwatch.sources.sglang.log.lines import SglangReader, ray_tag

__all__ = ["CRASH_STARTS", "interpret", "marks"]

CRASH_STARTS = tuple(marker for marker, _ in CRASH_MARKERS)
_MAX_MESSAGE = 2000
_DECODE_DROPS = frozenset({Pool.REQ})  # a PD decode worker checks its request rows against size + pre-alloc
_MARKS = SglangReader()  # reads prefixes for :func:`marks` only (its dating state does not matter)


def interpret(record: LogRecord) -> list[LogEvent]:
    """The events of one record (most records are none of these and give ``[]``)."""
    lines = record.lines
    if not record.attributed:  # an orphan block: its reports, no rank
        found = find_reports(lines, record.at)
        return [RankIncident(None, r.incident, r.error, _DECODE_DROPS) for r in found] or _assert(
            record, None
        )
    ranks = record.ranks or Ranks()
    events: list[LogEvent] = []
    if record.headless and not record.damaged:  # 0.1.x wrote no prefix: any line may be a batch line
        events += [e for line in lines if (e := _line_event(line, record.at, ranks)) is not None]
    else:
        head = _line_event(record.message, record.at, ranks, salvaged=record.damaged)
        if head is not None:
            if not record.continuation:
                return [head]  # a batch or startup line is one line: nothing else to look for
            events.append(head)  # lines after it belong to something else (an interleaved report)
    crash = record.message.startswith(CRASH_STARTS)
    reports = find_reports(lines, record.at, rest=crash or record.headless)
    events += [RankIncident(ranks, r.incident, r.error, _DECODE_DROPS) for r in reports]
    if crash:
        text = "\n".join(lines)[:_MAX_MESSAGE]
        incident = Incident(IncidentKind.SCHEDULER_EXCEPTION, text, record.at)
        events.append(RankIncident(ranks, incident, _crash_error(lines)))
    elif record.headless and not events:
        events += _assert(record, ranks)
    return events


def _assert(record: LogRecord, ranks: Ranks | None) -> list[LogEvent]:
    """A traceback with no crash header (an excerpt, Python's own stderr) that ends in a known
    allocator assert: the pool error it names, on the timeline (no incident: no crash is proven)."""
    error = _crash_error(record.lines)
    return [] if error is None else [Note(record.at, ranks, "allocator assert", error)]


def _line_event(message: str, at: float, ranks: Ranks, *, salvaged: bool = False) -> LogEvent | None:
    """The one-line event ``message`` is: a batch line or a startup line naming a pool size."""
    return parse_batch_line(message, at, ranks, salvaged=salvaged) or capacity_of(message, at, ranks)


def _crash_error(lines: tuple[str, ...]) -> PoolError | None:
    """The allocator assert a crash's traceback ends in (read from its last lines)."""
    for line in lines[-4:]:
        for known in CRASH_ASSERTS:
            if known.text.search(line):
                return PoolError(known.cls, known.what, known.pool, known.bugs)
    return None


def marks(line: str) -> Mark | None:
    """What in one line (collectors' prefixes already off) shows it is SGLang's."""
    head = _MARKS.read(line)
    text = head.message if head is not None else ray_tag(line).strip()
    said = next((what for what, seen in _SAYS if seen(text)), None)
    if said is not None:
        return Mark(said)
    if head is None:
        return None
    if (head.ranks is not None and head.ranks != Ranks()) or " TP" in line[:48]:
        return Mark("SGLang's rank prefix")
    return Mark("a [date time] prefix", strong=False)


_SAYS: tuple[tuple[str, Callable[[str], object]], ...] = (
    ("an SGLang batch line", lambda text: parse_batch_line(text, 0.0, Ranks())),
    ("an SGLang check's report", report_at),
    ("SGLang's scheduler crash", lambda text: text.startswith(CRASH_STARTS)),
    ("SGLang's pool size at start", lambda text: capacity_of(text, 0.0, Ranks())),
)
