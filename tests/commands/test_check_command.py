from __future__ import annotations

import argparse
import contextlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import replace

import httpx
import pytest
from tests.sources.sglang.fakes import Handler, captured, sglang_server

from poolwatch.codec.snapshot import dump_snapshot
from poolwatch.commands import check as check_command
from poolwatch.commands.check import CheckResult, as_json, as_text, check
from poolwatch.errors import Reason, ScrapeError
from poolwatch.model.findings import Tripwire, TripwireKind
from poolwatch.model.rank import Pool
from poolwatch.model.snapshot import Snapshot
from rigs.fakes.clock import FakeClock


async def run_check(handler: Handler, url: str = "http://h:30000", **options: object) -> CheckResult:
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        return await check(url, client, **options)  # type: ignore[arg-type]


async def test_a_probe_endpoint_is_checked_exactly(seed_snapshot: Snapshot) -> None:
    payload = dump_snapshot(replace(seed_snapshot, source="probe"))
    result = await run_check(lambda _: httpx.Response(200, json=payload))
    assert result.source == "probe"
    assert result.imbalance
    assert as_text(result).splitlines() == [
        "qwen3-next-prefill-0/dp0-tp0-pp0  [probe, idle]  "
        "mamba: surplus of 1 slot (double free); full: balanced",
        "http://h:30000: imbalance",
    ]


async def test_a_balanced_probe_exits_clean(seed_snapshot: Snapshot) -> None:
    mamba = replace(seed_snapshot.pools[Pool.MAMBA], available=472)
    balanced = replace(seed_snapshot, pools={**seed_snapshot.pools, Pool.MAMBA: mamba})
    result = await run_check(lambda _: httpx.Response(200, json=dump_snapshot(balanced)))
    assert not result.imbalance
    assert as_text(result).endswith("http://h:30000: no imbalance proven")


async def test_a_tripwire_is_an_imbalance_and_is_shown_with_its_slots(seed_snapshot: Snapshot) -> None:
    wire = Tripwire(TripwireKind.FREE_AND_LIVE, Pool.MAMBA, (17,), "process_prefill_chunk", 40)
    mamba = replace(seed_snapshot.pools[Pool.MAMBA], available=472)
    snap = replace(seed_snapshot, pools={**seed_snapshot.pools, Pool.MAMBA: mamba}, tripwires=(wire,))
    result = await run_check(lambda _: httpx.Response(200, json=dump_snapshot(snap)))
    assert result.imbalance
    assert "  tripwire free_and_live in mamba: slots 17 (after process_prefill_chunk)" in as_text(result)


async def test_an_sglang_server_is_checked_through_its_metrics_when_it_has_no_probe() -> None:
    result = await run_check(sglang_server(*captured("v0.5.12-dp2-decode")))
    assert result.source == "sglang-metrics"
    assert result.imbalance  # DP1's mamba used count is -1
    doc = as_json(result)
    assert [w["key"] for w in doc["workers"]] == ["h:30000/dp0-tp0-pp0", "h:30000/dp1-tp0-pp0"]
    mamba = next(f for f in doc["workers"][1]["findings"] if f["pool"] == "mamba")
    assert mamba == {"pool": "mamba", "balance": "surplus", "gap": -1, "basis": "negative_used", "slots": 1}


async def test_a_window_lets_an_sglang_check_prove_an_idle_leak() -> None:
    clock = FakeClock()
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        clock.advance(seconds)

    one_shot = await run_check(sglang_server(*captured("v0.5.9-unified")), clock=clock)
    assert not one_shot.imbalance  # one reading cannot prove the rank idle
    watched = await run_check(
        sglang_server(*captured("v0.5.9-unified")), window=40.0, interval=5.0, clock=clock, sleep=sleep
    )
    assert watched.imbalance
    assert waits == [5.0] * 8
    assert "mamba: deficit of 1 slot (leak); full: balanced" in as_text(watched)


@pytest.mark.parametrize(
    ("handler", "source", "reason"),
    [
        (lambda _: (_ for _ in ()).throw(httpx.ConnectError("refused")), "auto", Reason.CONNECT),
        (lambda _: httpx.Response(404), "probe", Reason.HTTP_STATUS),
        (lambda _: httpx.Response(404), "auto", Reason.HTTP_STATUS),
        (lambda _: httpx.Response(200, text="not exposition {"), "sglang", Reason.PARSE),
    ],
)
async def test_an_unreachable_or_wrong_target_is_an_error(
    handler: Handler, source: str, reason: Reason
) -> None:
    with pytest.raises(ScrapeError) as err:
        await run_check(handler, source=source)
    assert err.value.reason is reason


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    check_command.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_the_command_exits_two_for_an_unreachable_url(capsys: pytest.CaptureFixture[str]) -> None:
    code = check_command.run(parse("http://127.0.0.1:9", "--timeout", "0.5"))
    assert code == 2
    assert capsys.readouterr().err.startswith("poolwatch check: http://127.0.0.1:9: ")


def test_the_command_rejects_bad_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    assert check_command.run(parse("http://h", "--window", "-1")) == 2
    assert "must be" in capsys.readouterr().err


@contextlib.contextmanager
def stalling_server(trickle: bool) -> Iterator[str]:
    """A loopback server that accepts and never completes an answer: silent, or a status line and
    then a header line every 50 ms (each read comes well within a per-read timeout, the answer
    never).  Its thread stops when the test leaves the block."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)
    stop = threading.Event()
    held: list[socket.socket] = []

    def serve() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                conn, _ = listener.accept()
                held.append(conn)
                if trickle:
                    conn.sendall(b"HTTP/1.1 200 OK\r\n")
            for conn in held if trickle else ():
                with contextlib.suppress(OSError):
                    conn.sendall(b"X-Pad: 1\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        listener.close()


@pytest.mark.parametrize("trickle", [False, True], ids=["silent", "trickling"])
@pytest.mark.parametrize("source", ["auto", "probe", "sglang"])
def test_a_target_that_never_answers_ends_the_check_at_its_deadline_with_exit_two(
    trickle: bool, source: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with stalling_server(trickle) as url:
        code = check_command.run(parse(url, "--source", source, "--timeout", "0.3"))
    assert code == 2
    assert capsys.readouterr().err == (
        f"poolwatch check: {url}: no complete answer within 0.3 s (--timeout) (timeout)\n"
    )


def test_the_deadline_has_a_default_and_includes_the_window() -> None:
    args = parse("http://h", "--window", "40")
    assert (args.timeout, args.window) == (check_command.DEFAULT_TIMEOUT_S, 40.0)
