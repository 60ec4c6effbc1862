from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from poolwatch.model.rank import IncidentKind, Pool, Role
from poolwatch.sources.logfile.events import Figures, PoolSize, RankIncident
from poolwatch.sources.logfile.heads import Ranks
from poolwatch.sources.logfile.records import LogRecord
from poolwatch.sources.sglang.log.batch import parse_batch_line
from poolwatch.sources.sglang.log.events import interpret

R0 = Ranks()


def rec(
    at: float, ranks: Ranks, message: str, continuation: tuple[str, ...] = (), **flags: bool
) -> LogRecord:
    return LogRecord(at, message, continuation, ranks.label(), ranks, **flags)


def batch(message: str) -> Figures:
    parsed = parse_batch_line(message, 1.0, R0)
    assert parsed is not None
    return parsed


@pytest.mark.parametrize(
    ("line", "used", "usage", "queues", "role"),
    [
        pytest.param(
            "Prefill batch, #new-seq: 1, #new-token: 8192, #cached-token: 0, full token usage: 0.01, "
            "mamba usage: 0.02, #running-req: 0, #queue-req: 3, #prealloc-req: 1, #inflight-req: 2, "
            "input throughput (token/s): 12051.77, ",
            {},
            {Pool.FULL: 0.01, Pool.MAMBA: 0.02},
            {"running": 0, "waiting": 3, "bootstrap": 1, "inflight": 2},
            Role.PREFILL,
            id="0.5.4-pd-prefill",
        ),
        pytest.param(
            "Decode batch, #running-req: 32, #token: 9216, token usage: 0.05, cuda graph: True, "
            "gen throughput (token/s): 2210.45, #queue-req: 0, ",
            {Pool.FULL: 9216},
            {Pool.FULL: 0.05},
            {"running": 32, "waiting": 0},
            None,
            id="0.5.4-decode",
        ),
        pytest.param(
            "Decode batch, #running-req: 8, #full token: 400, full token usage: 0.10, #swa token: 120, "
            "swa token usage: 0.30, accept len: 2.71, accept rate: 0.68, cuda graph: False, "
            "gen throughput (token/s): 18.00, #queue-req: 1, ",
            {Pool.FULL: 400, Pool.SWA: 120},
            {Pool.FULL: 0.10, Pool.SWA: 0.30},
            {"running": 8, "waiting": 1},
            None,
            id="0.5.4-swa-spec",
        ),
        pytest.param(
            "Prefill batch [1204], #new-seq: 1, #new-token: 512, #cached-token: 0, full token usage: 0.01, "
            "mamba usage: 0.05, #running-req: 12, #queue-req: 2, input throughput (token/s): 4102.03, "
            "cuda graph: False",
            {},
            {Pool.FULL: 0.01, Pool.MAMBA: 0.05},
            {"running": 12, "waiting": 2},
            None,
            id="0.5.9-prefill",
        ),
        pytest.param(
            "Decode batch, #running-req: 30, #full token: 61440, full token usage: 0.05, mamba num: 60, "
            "mamba usage: 0.06, pre-allocated usage: 0.00, #prealloc-req: 1, #transfer-req: 0, "
            "#retracted-req: 0, cuda graph: True, gen throughput (token/s): 1502.87, #queue-req: 0",
            {Pool.FULL: 61440, Pool.MAMBA: 60},
            {Pool.FULL: 0.05, Pool.MAMBA: 0.06},
            {"running": 30, "waiting": 0, "prealloc": 1, "transfer": 0, "retracted": 0},
            Role.DECODE,
            id="0.5.9-pd-decode",
        ),
        pytest.param(
            "Prefill batch [77], #new-seq: 2, #new-token: 8192, #cached-token: 512, full token usage: 0.02, "
            "mamba usage: 0.03, #running-req: 0, #queue-req: 1, #pending-token: 4096, #bootstrap-req: 2, "
            "#inflight-req: 0, cuda graph: False, input throughput (token/s): 15032.90, "
            "est. prefill TFLOPS/s (per GPU): 212.40, fwd occupancy: 71.20%",
            {},
            {Pool.FULL: 0.02, Pool.MAMBA: 0.03},
            {"running": 0, "waiting": 1, "bootstrap": 2, "inflight": 0},
            Role.PREFILL,
            id="0.5.12-pd-prefill",
        ),
        pytest.param(
            "Decode batch [912], #running-req: 3, #full token: 3072, full token usage: 0.01, mamba num: 6, "
            "mamba usage: 0.02, cuda graph: True, gen throughput (token/s): 95.12, #queue-req: 0",
            {Pool.FULL: 3072, Pool.MAMBA: 6},
            {Pool.FULL: 0.01, Pool.MAMBA: 0.02},
            {"running": 3, "waiting": 0},
            None,
            id="0.5.12-decode",
        ),
    ],
)
def test_batch_lines_of_every_release_give_counts_ratios_and_queues(
    line: str, used: dict[Pool, int], usage: dict[Pool, float], queues: dict[str, int], role: Role | None
) -> None:
    parsed = batch(line)
    assert dict(parsed.used) == used
    assert dict(parsed.usage) == usage
    assert dict(parsed.queues) == queues
    assert parsed.role is role
    assert parsed.negative == frozenset()


def test_the_iteration_number_is_read_when_sglang_logs_it() -> None:
    assert batch("Decode batch [912], #running-req: 3, #token: 5, token usage: 0.00").iteration == 912
    assert batch("Decode batch, #running-req: 3, #token: 5, token usage: 0.00").iteration is None


def test_a_negative_ratio_is_flagged_even_when_it_rounds_to_zero() -> None:
    parsed = batch(
        "Prefill batch, #new-seq: 1, #new-token: 64, #cached-token: 0, full token usage: 0.00, "
        "mamba usage: -0.00, #running-req: 0, #queue-req: 0, "
    )
    assert parsed.negative == frozenset({Pool.MAMBA})


def test_a_negative_count_is_kept_as_it_is() -> None:
    parsed = batch(
        "Decode batch, #running-req: 1, #full token: 40, full token usage: 0.00, mamba num: -1, "
        "mamba usage: -0.00, cuda graph: True, gen throughput (token/s): 52.66, #queue-req: 0"
    )
    assert parsed.used[Pool.MAMBA] == -1


@pytest.mark.parametrize(
    ("message", "pool", "size"),
    [
        (
            "max_total_num_tokens=1664761, chunked_prefill_size=8192, max_prefill_tokens=16384, "
            "max_running_requests=158, context_len=262144, available_gpu_mem=19.84 GB",
            Pool.FULL,
            1664761,
        ),
        (
            "Mamba Cache is allocated. max_mamba_cache_size: 476, conv_state size: 0.11GB, "
            "ssm_state size: 4.45GB ",
            Pool.MAMBA,
            476,
        ),
    ],
)
def test_startup_lines_give_pool_sizes(message: str, pool: Pool, size: int) -> None:
    assert interpret(rec(2.0, R0, message)) == [PoolSize(2.0, R0, pool, size, boot=pool is Pool.FULL)]


def test_a_crash_with_a_leak_report_is_two_incidents() -> None:
    record = rec(
        3.0,
        Ranks(tp=1),
        "Scheduler hit an exception: Traceback (most recent call last):",
        ("  File x", "ValueError: pool memory leak detected! [mamba] total=4, available=5, evictable=0"),
    )
    events = interpret(record)
    assert [e.incident.kind for e in events if isinstance(e, RankIncident)] == [
        IncidentKind.LEAK_DETECTED,
        IncidentKind.SCHEDULER_EXCEPTION,
    ]
    assert all(e.ranks == Ranks(tp=1) for e in events)


def test_ordinary_lines_are_no_events() -> None:
    assert interpret(rec(1.0, R0, 'INFO:     10.0.3.7:52114 - "POST /generate HTTP/1.1" 200 OK')) == []
    assert parse_batch_line("Prefill batchy, #new-seq: 1", 1.0, R0) is None


counts = st.integers(min_value=-(10**6), max_value=10**7)
ratios = st.floats(min_value=-1.0, max_value=1.0, allow_nan=False)


@given(counts, counts, ratios, ratios, st.integers(0, 4096), st.integers(0, 4096), st.booleans())
def test_any_ssm_decode_line_parses_back(
    full: int, mamba: int, full_ratio: float, mamba_ratio: float, running: int, queued: int, spec: bool
) -> None:
    accept = "accept len: 2.10, accept rate: 0.55, " if spec else ""
    line = (
        f"Decode batch, #running-req: {running}, #full token: {full}, full token usage: {full_ratio:.2f}, "
        f"mamba num: {mamba}, mamba usage: {mamba_ratio:.2f}, {accept}cuda graph: True, "
        f"gen throughput (token/s): 12.50, #queue-req: {queued}"
    )
    parsed = batch(line)
    assert dict(parsed.used) == {Pool.FULL: full, Pool.MAMBA: mamba}
    assert parsed.usage[Pool.MAMBA] == pytest.approx(float(f"{mamba_ratio:.2f}"))
    assert dict(parsed.queues) == {"running": running, "waiting": queued}
    assert (Pool.MAMBA in parsed.negative) == f"{mamba_ratio:.2f}".startswith("-")


@given(st.text(max_size=400))
def test_any_message_is_interpreted_without_failing(message: str) -> None:
    for event in interpret(rec(0.0, R0, message)):
        assert isinstance(event, Figures | PoolSize | RankIncident)


@pytest.mark.parametrize(
    ("line", "kind", "used", "usage", "queues"),
    [
        pytest.param(
            "new fill batch. #seq: 6. #cached_token: 1320. #new_token: 2874. #remaining_req: 11. "
            "#running_req: 2. tree_cache_hit_rate: 31.47%.",
            "prefill",
            {},
            {},
            {"waiting": 11, "running": 2},
            id="0.1-new-fill-batch",
        ),
        pytest.param(
            "Prefill batch(mixed #running-req: 1). #new-seq: 2, #new-token: 640, #cached-token: 12, "
            "cache hit rate: 0.44%, #queue-req: 3",
            "prefill",
            {},
            {},
            {"waiting": 3},
            id="0.2-mixed-chunk",
        ),
        pytest.param(
            "Decode batch. #running-req: 3, #token: 3120, token usage: 0.04, "
            "gen throughput (token/s): 301.22, #queue-req: 0",
            "decode",
            {Pool.FULL: 3120},
            {Pool.FULL: 0.04},
            {"running": 3, "waiting": 0},
            id="0.2-0.5.3-decode",
        ),
        pytest.param(
            "Prefill batch. #new-seq: 1, #new-token: 8192, #cached-token: 0, full token usage: 0.02, "
            "swa token usage: -0.00, #running-req: 0, #queue-req: 0, ",
            "prefill",
            {},
            {Pool.FULL: 0.02, Pool.SWA: -0.0},
            {"running": 0, "waiting": 0},
            id="0.5.2-swa-prefill",
        ),
    ],
)
def test_the_older_batch_forms_give_their_figures(
    line: str, kind: str, used: dict[Pool, int], usage: dict[Pool, float], queues: dict[str, int]
) -> None:
    got = batch(line)
    assert (got.kind, got.used, got.usage, got.queues) == (kind, used, usage, queues)


def test_an_exception_printed_without_any_prefix_is_still_a_report() -> None:
    record = rec(
        5.0,
        R0,
        "AssertionError: SWA Pool Mem Leak Detected! [swa] total=65536, available=60000, evictable=5000, "
        "protected=0, session_held=2, uncached=500",
        headless=True,
    )
    (event,) = interpret(record)
    assert isinstance(event, RankIncident)
    assert event.incident.kind is IncidentKind.BUSY_CHECK_FAILED
    (swa,) = event.incident.pools
    assert (swa.pool, swa.size, swa.available, swa.evictable, swa.held, swa.session_held) == (
        Pool.SWA,
        65536,
        60000,
        5000,
        500,
        2,
    )


def test_a_report_continuing_a_batch_line_is_in_no_position_sglang_writes_one() -> None:
    """SGLang writes a report as a line's own message, a crash's exception line or a Python warning;
    text after a batch line's record (a request's raw text) is none of these."""
    record = rec(
        5.0,
        Ranks(0, 1, 0),
        "Decode batch, #running-req: 1, #token: 40, token usage: 0.00",
        ("ValueError: pool memory leak detected! [full] total=10, available=11, evictable=0",),
    )
    assert [type(e).__name__ for e in interpret(record)] == ["Figures"]
