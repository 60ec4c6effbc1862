"""A block whose rank header lies before the log (an orphaned traceback, a leak report) is never rank 0's."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import FIXTURES

from poolwatch.model.rank import IncidentKind, Pool, SourceKind
from poolwatch.sources.logfile.assembler import LineAssembler
from poolwatch.sources.logfile.events import RankIncident
from poolwatch.sources.logfile.fold import LogFold
from poolwatch.sources.logfile.records import LogRecord, RecordAssembler
from poolwatch.sources.sglang.log.dialect import DIALECT
from rigs.log_records import records

ORPHANED = FIXTURES / "sglang-logs" / "v0.5.4-orphaned-leak-traceback.log"


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def fold() -> LogFold:
    return LogFold("prefill-0", engine="sglang", source=SourceKind("sglang-log"))


def test_the_orphaned_leak_report_is_held_unattributed_and_folded_into_no_rank() -> None:
    found = records(DIALECT, lines(ORPHANED))
    (orphan,) = [r for r in found if not r.attributed]
    assert "mamba_available_size=473" in "\n".join(orphan.lines)
    events = [e for r in found for e in DIALECT.interpret(r)]
    (held,) = [e for e in events if isinstance(e, RankIncident) and e.ranks is None]
    assert held.incident.kind is IncidentKind.LEAK_DETECTED
    assert not [e for e in events if isinstance(e, RankIncident) and e.ranks is not None]  # before: rank 0's
    folded = fold()
    snaps = [s for e in events if (s := folded.apply(e)) is not None]
    assert all(not s.incidents for s in snaps)  # no rank's snapshot carries the report
    assert {(s.worker.tp_rank, s.worker.dp_rank) for s in snaps} == {(0, 0), (1, 0)}
    assert [i.kind for i in folded.unattributed] == [IncidentKind.LEAK_DETECTED]
    assert folded.unattributed_total == 1
    figures = folded.detached(held)  # what the report says, for a verdict only
    assert figures.pools[Pool.MAMBA].available == 473


def test_a_live_log_gone_quiet_inside_the_orphan_holds_it_until_a_prefixed_line_settles_it() -> None:
    text = lines(ORPHANED)
    cut = text.index("") + 1  # the traceback and the report, then the log is quiet
    assembler = LineAssembler(DIALECT.reader(None), DIALECT.wraps)
    grouped = RecordAssembler(DIALECT.framing)

    def feed(part: list[str]) -> list[LogRecord]:
        logical = [lg for line in part for lg in assembler.feed(line)] + assembler.flush()  # quiet
        return [r for lg in logical for r in grouped.feed(lg.text, lg.head)] + grouped.flush(final=False)

    assert feed(text[:cut]) == []  # held: neither rank 0's nor dropped
    late = feed(text[cut:])
    assert [r.attributed for r in late][:1] == [False]
    assert grouped.unattributed == 1


def test_a_log_without_any_prefix_keeps_stamping_its_lines_as_before() -> None:
    text = lines(FIXTURES / "sglang-logs" / "v0.1-kv-warning.log")
    assert all(r.attributed for r in records(DIALECT, text))
    few = records(DIALECT, text, final=False, prefixless_after=3)  # a live 0.1.x log: settled after 3 lines
    assert few
    assert all(r.attributed for r in few)


def test_unprefixed_lines_after_a_prefixed_line_keep_that_lines_rank() -> None:
    text = ["[2025-11-03 09:14:00 TP3] Scheduler hit an exception: Traceback (most recent call last):"]
    text += lines(ORPHANED)[:8]
    (record,) = records(DIALECT, text)
    assert record.ranks is not None
    assert (record.attributed, record.ranks.tp, len(record.continuation)) == (True, 3, 8)
