"""Property tests: each class of production noise added to valid SGLang lines leaves the parse unchanged.

The valid lines are the batch lines and reports of several release families; the noise classes
are those of the issue: prefixes before the first ``[`` (Ray actor, ISO launcher, CRI stream,
leading spaces, a custom ``logging`` format), ANSI colour anywhere (inside a leak report too),
CRLF, another rank's line inside a traceback, a 5,000-digit rank tag and a cut last line.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from poolwatch.commands.replay.command import stream_file
from poolwatch.sources.logfile.events import RankIncident
from poolwatch.sources.logfile.replay import Row
from poolwatch.sources.logfile.replayer import Replayer
from poolwatch.sources.sglang.log.dialect import DIALECT
from rigs.log_records import records

LOGS: tuple[tuple[str, ...], ...] = (
    (
        "[2024-11-20 10:00:00 TP0] max_total_num_tokens=150004, max_prefill_tokens=16384, context_len=8192",
        "[2024-11-20 10:00:12 TP0] Prefill batch. #new-seq: 1, #new-token: 23, #cached-token: 0, "
        "cache hit rate: 0.00%, token usage: 0.00, #running-req: 0, #queue-req: 0",
        "[2024-11-20 10:00:13 TP0] Decode batch. #running-req: 1, #token: -57, token usage: -0.00, "
        "gen throughput (token/s): 41.02, #queue-req: 0",
    ),
    (
        "[2026-03-02 14:05:10 DP0 TP0] Decode batch, #running-req: 12, #full token: 20480, "
        "full token usage: 0.05, mamba num: 24, mamba usage: 0.05, cuda graph: True, "
        "gen throughput (token/s): 812.33, #queue-req: 0",
        "[2026-03-02 14:07:31 DP0 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/utils/common.py", line 3774, in raise_error_or_warn',
        "    raise ValueError(message)",
        "ValueError: token_to_kv_pool_allocator memory leak detected! full_available_size=6016, "
        "full_evictable_size=390685, self.token_to_kv_pool_allocator.size=396701, "
        "self.tree_cache.full_protected_size()=0",
        "mamba_available_size=317, mamba_evictable_size=138, self.req_to_token_pool.mamba_pool.size=454, "
        "self.tree_cache.mamba_protected_size()=0, leaked_full_pages=None, leaked_mamba_pages=None",
        "[2026-03-02 14:07:32 DP0 TP0] Decode batch, #running-req: 0, #full token: 0, "
        "full token usage: 0.00, mamba num: 0, mamba usage: 0.00, cuda graph: True, "
        "gen throughput (token/s): 0.00, #queue-req: 0",
    ),
    (
        "[2026-05-20 10:04:00 TP1] pool memory leak detected! [full] total=512000, available=511000, "
        "evictable=1000, protected=0, session_held=0, uncached=0",
        "[swa] total=65536, available=65530, evictable=8, protected=0, session_held=0, uncached=0",
        "[2026-05-20 10:04:01 TP1] AssertionError: SWA Pool Mem Leak Detected! [swa] total=65536, "
        "available=60000, evictable=5000, protected=0, session_held=0, uncached=500",
        "[2026-05-20 10:04:02.250 TP1] Prefill batch [88], #new-seq: 1, #new-token: 512, #cached-token: 0, "
        "full token usage: 0.01, swa token usage: 0.05, #running-req: 3, #queue-req: 2, cuda graph: False",
    ),
)

PREFIXES = (
    "(SGLangEngine pid=4242) ",
    "(SGLangEngine pid=7, ip=10.0.0.3) ",
    "2026-05-20T10:04:00.123456789Z stdout F ",
    "2026-05-20T10:04:00Z stderr F ",
    "2026-05-20T10:04:00.5Z INFO ",
    " ",
    "   ",
)
ANSI = ("\x1b[32m", "\x1b[0m", "\x1b[1;31m", "\x1b[2K")


def parse(lines: Sequence[str]) -> list[object]:
    """The events of ``lines``; an incident as its rank, kind, time and figures (its text keeps
    the continuation lines' own indentation, which a leading-space prefix changes)."""
    events = [e for r in records(DIALECT, lines) for e in DIALECT.interpret(r)]
    return [
        (e.ranks, e.incident.kind, e.incident.at, e.incident.pools) if isinstance(e, RankIncident) else e
        for e in events
    ]


def noisy(apply: Callable[[str, int], str]) -> Callable[[tuple[str, ...], int], list[str]]:
    return lambda log, seed: [apply(line, seed + i) for i, line in enumerate(log)]


logs = st.sampled_from(LOGS)


@given(logs, st.integers(0, 1000))
def test_a_prefix_before_the_first_bracket_changes_nothing(log: tuple[str, ...], seed: int) -> None:
    prefixed = noisy(lambda line, n: PREFIXES[n % len(PREFIXES)] + line)(log, seed)
    same_actor = [PREFIXES[0] + line for line in log]  # continuation lines carry the actor prefix too
    assert parse(prefixed) == parse(log)
    assert parse(same_actor) == parse(log)
    assert parse(log)  # every log says something


@given(logs, st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(ANSI)), max_size=8))
def test_ansi_codes_anywhere_change_nothing(log: tuple[str, ...], codes: list[tuple[int, str]]) -> None:
    coloured = list(log)
    for where, code in sorted(codes, key=lambda c: c[0] % (len(log[c[0] % len(log)]) + 1), reverse=True):
        index = where % len(log)
        cut = where % (len(log[index]) + 1)  # a place in the original line, never inside another code
        coloured[index] = coloured[index][:cut] + code + coloured[index][cut:]
    assert parse(coloured) == parse(log)


@given(logs)
def test_crlf_line_endings_change_nothing(log: tuple[str, ...]) -> None:
    assert parse([line + "\r\n" for line in log]) == parse(log)


@given(logs, st.integers(0, 1000))
def test_leading_spaces_and_cri_prefixes_on_every_line_change_nothing(
    log: tuple[str, ...], seed: int
) -> None:
    cri = PREFIXES[2 + seed % 2]
    assert parse([cri + line for line in log]) == parse(log)


@given(st.integers(1, 3))
def test_another_ranks_line_inside_a_traceback_hides_nothing(depth: int) -> None:
    log = list(LOGS[1])
    other = "[2026-03-02 14:07:31 DP1 TP1] Decode batch, #running-req: 3, #full token: 5120, mamba num: 7"
    with_other = [*log[: 1 + depth], other, *log[1 + depth :]]
    clean_events = parse(log)
    noisy_events = parse(with_other)
    assert [e for e in noisy_events if getattr(e, "ranks", None) != parse([other])[0].ranks] == clean_events


def problems_of(feed: Callable[[Replayer], None]) -> tuple[object, ...]:
    rows: list[Row] = []
    replayer = Replayer(DIALECT, "w", rows.append, every=0)
    feed(replayer)
    report = replayer.finish()
    return report.first_problem, tuple((r.event, tuple(sorted(r.figures.items()))) for r in rows)


@settings(max_examples=60, deadline=None)
@given(logs, st.data())
def test_an_incomplete_last_line_never_adds_a_finding(log: tuple[str, ...], data: st.DataObject) -> None:
    text = "\n".join(log) + "\n"
    cut = data.draw(st.integers(1, len(text) - 1))
    complete = text[:cut].rpartition("\n")[0]
    whole_lines = complete.split("\n") if complete else []
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "cut.log"
        path.write_text(text[:cut])
        from_file = problems_of(lambda r: stream_file(path, r, lambda _: None))
    assert from_file == problems_of(lambda r: r.feed(whole_lines))


def test_a_five_thousand_digit_rank_is_rejected_without_dropping_the_next_lines() -> None:
    huge = "[2026-05-20 10:04:00 TP" + "9" * 5000 + "] Decode batch, #running-req: 1, #token: -3"
    events = parse([huge, *LOGS[2]])
    assert events == parse(LOGS[2])


@given(st.sampled_from(LOGS[:2]), st.sampled_from(["INFO", "WARNING", "ERROR"]), st.integers(1, 99999))
def test_a_custom_logging_format_reads_like_sglangs_own_on_rank_zero(
    log: tuple[str, ...], level: str, pid: int
) -> None:
    def custom(line: str) -> str:
        if not line.startswith("[20"):
            return line
        stamp, _, message = line[1:].partition("] ")
        return f"{stamp[:19]},000 {level} {pid} [scheduler.py:812] {message}"

    assert parse([custom(line) for line in log]) == parse(log)
