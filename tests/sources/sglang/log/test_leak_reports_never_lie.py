"""No wrong sign, ever: every leak-report format, cut at every field boundary and wrapped at every
width from 40 to 200 columns, reads exact or says unknown.

A report whose rest was lost (an excerpt's end) or whose lines a terminal or collector split is read
through the whole pipeline the replay and the live source share (the line assembler, records, the
dialect).  Per pool, the reading may be the exact gap, a surplus bound the remaining figures prove,
or unknown -- never a sign the figures do not give, never a figure read as 0 because it was cut off.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.sources.logs import events
from tests.sources.sglang.log.reports import WRITERS, Figures, Report, cut, field_ends, wrap

from poolwatch.conservation import Basis, Finding, assess
from poolwatch.model.rank import IncidentKind, Phase, Pool
from poolwatch.sources.logfile.events import RankIncident
from poolwatch.sources.sglang.log.dialect import DIALECT

WIDTHS = range(40, 201)
_REPORTS = (IncidentKind.LEAK_DETECTED, IncidentKind.BUSY_CHECK_FAILED)


def read(report: Report, lines: list[str]) -> dict[Pool, Finding]:
    """Each pool's finding from the first report the log's lines give (none: every pool unknown)."""
    found = [
        e.incident
        for e in events(DIALECT, [*report.before, *lines, *report.after])
        if isinstance(e, RankIncident) and e.incident.kind in _REPORTS
    ]
    if not found:
        return {}
    phase = Phase.BUSY if report.busy else Phase.IDLE
    return {a.pool: assess(a, phase) for a in found[0].pools}


def wrong(report: Report, findings: dict[Pool, Finding]) -> list[str]:
    """What a reading says that the figures do not: a sign or size other than the truth."""
    said = []
    for pool, finding in findings.items():
        truth = report.truth.get(pool, "absent")
        if finding.gap is None:
            continue  # unknown: always allowed
        if truth is None or truth == "absent":
            said.append(f"{pool}: {finding} where no sign is true")
        elif finding.basis is Basis.NEGATIVE_USED:
            if not (isinstance(truth, int) and truth <= finding.gap < 0):
                said.append(f"{pool}: bound {finding.gap} but the gap is {truth}")
        elif finding.gap != truth:
            said.append(f"{pool}: {finding.gap} but the gap is {truth}")
    return said


counts = st.integers(0, 5_000_000)
small = st.integers(-3, 3)


@st.composite
def figures(draw: st.DrawFn) -> Figures:
    """Figures near balance (a gap of a few slots either way), with now and then a counter that
    cannot be right."""
    size = draw(counts)
    evictable, protected, held, session = draw(counts), draw(st.integers(0, 4096)), draw(counts), draw(counts)
    if draw(st.booleans()):
        evictable, held, session = evictable % (size + 1), held % 64, session % 16
    available = size - evictable - protected - held - session + draw(small)
    if draw(st.integers(0, 9)) == 0:
        protected = -draw(st.integers(1, 64))
    return Figures(size, available, evictable, protected, held, session)


def pools(draw: st.DrawFn) -> dict[Pool, Figures]:
    return {p: draw(figures()) for p in (Pool.FULL, Pool.SWA, Pool.MAMBA, Pool.REQ, Pool.MAMBA_CKPT)}


FIXED = {  # one set of figures for the exhaustive sweep: a surplus, a deficit, balance, a counter error
    Pool.FULL: Figures(1664761, 1663700, 1066, 0),
    Pool.SWA: Figures(65536, 60000, 5000, 0, 500, 0),
    Pool.MAMBA: Figures(476, 473, 4, 0),
    Pool.REQ: Figures(3757, 3750, 0, 0, 0, 2),
    Pool.MAMBA_CKPT: Figures(320, 300, 12, -12),
}


@pytest.mark.parametrize("write", WRITERS, ids=[w.__name__ for w in WRITERS])
def test_every_format_whole_reads_exact(write: object) -> None:
    assert callable(write)
    report = write(FIXED)
    findings = read(report, report.lines)
    assert not wrong(report, findings)
    for pool, truth in report.truth.items():
        if truth is not None:
            assert findings[pool].basis is Basis.EXACT, (report.family, pool)


@pytest.mark.parametrize("write", WRITERS, ids=[w.__name__ for w in WRITERS])
def test_every_format_cut_at_every_field_and_wrapped_at_every_width_reads_exact_or_unknown(
    write: object,
) -> None:
    assert callable(write)
    report = write(FIXED)
    failures = []
    for end in [None, *field_ends(report.lines)]:
        lines = report.lines if end is None else cut(report.lines, end)
        for width in WIDTHS:
            said = wrong(report, read(report, wrap(lines, width)))
            if said:
                failures.append((end, width, said))
        said = wrong(report, read(report, lines))
        if said:
            failures.append((end, None, said))
    assert failures == []


@pytest.mark.parametrize("write", WRITERS, ids=[w.__name__ for w in WRITERS])
def test_a_report_wrapped_at_any_width_reads_as_the_whole_one(write: object) -> None:
    """A terminal's wrap loses no character: the line assembler joins it back, the reading is exact."""
    assert callable(write)
    report = write(FIXED)
    whole = read(report, report.lines)
    lost = [w for w in WIDTHS if read(report, wrap(report.lines, w)) != whole]
    assert lost == []


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_any_figures_cut_and_wrapped_anywhere_never_give_a_wrong_sign(data: st.DataObject) -> None:
    write = data.draw(st.sampled_from(WRITERS))
    report = write(pools(data.draw))
    ends = [None, *field_ends(report.lines)]
    end = data.draw(st.sampled_from(ends))
    lines = report.lines if end is None else cut(report.lines, end)
    width = data.draw(st.sampled_from([None, *WIDTHS]))
    shown = lines if width is None else wrap(lines, width)
    assert wrong(report, read(report, shown)) == []
