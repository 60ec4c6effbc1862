"""A block whose rank header lies before the log (an orphaned traceback, a leak report) is never rank 0's."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import FIXTURES

from poolwatch.model.rank import IncidentKind, Pool
from poolwatch.sources.sglang.log.events import RankIncident, UnattributedIncident, interpret
from poolwatch.sources.sglang.log.records import LogRecord, RecordAssembler
from poolwatch.sources.sglang.log.state import LogFold

ORPHANED = FIXTURES / "sglang-logs" / "v0.5.4-orphaned-leak-traceback.log"


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def assemble(text: list[str], *, final: bool = True, **kwargs: int) -> list[LogRecord]:
    assembler = RecordAssembler(**kwargs)
    out = [r for line in text for r in assembler.feed(line)]
    return out + assembler.flush(final=final)


def test_the_orphaned_leak_report_is_held_unattributed_and_folded_into_no_rank() -> None:
    records = assemble(lines(ORPHANED))
    (orphan,) = [r for r in records if not r.attributed]
    assert "mamba_available_size=473" in "\n".join(orphan.lines)
    events = [e for r in records for e in interpret(r)]
    (held,) = [e for e in events if isinstance(e, UnattributedIncident)]
    assert held.incident.kind is IncidentKind.LEAK_DETECTED
    assert not [e for e in events if isinstance(e, RankIncident)]  # before the fix: rank 0's leak
    fold = LogFold("prefill-0")
    snaps = [s for e in events if (s := fold.apply(e)) is not None]
    assert all(not s.incidents for s in snaps)  # no rank's snapshot carries the report
    assert {(s.worker.tp_rank, s.worker.dp_rank) for s in snaps} == {(0, 0), (1, 0)}
    assert [i.kind for i in fold.unattributed] == [IncidentKind.LEAK_DETECTED]
    assert fold.unattributed_total == 1
    figures = fold.detached(held)  # what the report says, for a verdict only
    assert figures.pools[Pool.MAMBA].available == 473


def test_a_live_log_gone_quiet_inside_the_orphan_holds_it_until_a_prefixed_line_settles_it() -> None:
    text = lines(ORPHANED)
    cut = text.index("") + 1  # the traceback and the report, then the log is quiet
    assembler = RecordAssembler()
    early = [r for line in text[:cut] for r in assembler.feed(line)] + assembler.flush(final=False)
    assert early == []  # held: neither rank 0's nor dropped
    late = [r for line in text[cut:] for r in assembler.feed(line)] + assembler.flush(final=False)
    assert [r.attributed for r in late][:1] == [False]
    assert assembler.unattributed == 1


def test_a_log_without_any_prefix_keeps_stamping_its_lines_as_before() -> None:
    text = lines(FIXTURES / "sglang-logs" / "v0.1-kv-warning.log")
    assert all(r.attributed for r in assemble(text))
    few = assemble(text, final=False, prefixless_after=3)  # a live 0.1.x log: settled after 3 lines
    assert few
    assert all(r.attributed for r in few)


def test_unprefixed_lines_after_a_prefixed_line_keep_that_lines_rank() -> None:
    text = ["[2025-11-03 09:14:00 TP3] Scheduler hit an exception: Traceback (most recent call last):"]
    text += lines(ORPHANED)[:8]
    (record,) = assemble(text)
    assert (record.attributed, record.ranks.tp, len(record.continuation)) == (True, 3, 8)
