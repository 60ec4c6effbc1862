from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import httpx
import pytest

from poolwatch.codec.snapshot import dump_snapshot
from poolwatch.conservation import assess_snapshot, describe
from poolwatch.errors import Reason, ScrapeError
from poolwatch.model.findings import Tripwire, TripwireKind
from poolwatch.model.rank import Pool, Role
from poolwatch.model.snapshot import Snapshot
from poolwatch.sources.base import Source, Target
from poolwatch.sources.probe_source import ProbeSource, parse_probe_payload

Handler = Callable[[httpx.Request], httpx.Response]


def probe_target(url: str = "http://127.0.0.1:41234", worker: str = "", role: Role = Role.UNIFIED) -> Target:
    return Target("probe:p", "probe", url, worker, role, {"instance": "pod-a"})


async def scrape(handler: Handler, target: Target | None = None, max_bytes: int = 4 << 20) -> list[Snapshot]:
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        return await ProbeSource(target or probe_target(), max_bytes).scrape(client)


async def test_the_probe_snapshot_is_read_from_v1_snapshot(seed_snapshot: Snapshot) -> None:
    seen: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, json=dump_snapshot(seed_snapshot))

    (snap,) = await scrape(handle)
    assert seen == ["http://127.0.0.1:41234/v1/snapshot"]
    assert snap == seed_snapshot
    assert describe(assess_snapshot(snap)) == "mamba: surplus of 1 slot (double free); full: balanced"


def test_a_url_that_names_the_endpoint_is_used_as_it_is() -> None:
    source = ProbeSource(probe_target("http://10.0.0.7:9000/v1/snapshot/"))
    assert isinstance(source, Source)
    assert source.url == "http://10.0.0.7:9000/v1/snapshot/"
    assert ProbeSource(probe_target("http://10.0.0.7:9000/")).url == "http://10.0.0.7:9000/v1/snapshot"


def test_the_target_names_the_worker_and_role_when_it_knows_them(seed_snapshot: Snapshot) -> None:
    doc = dump_snapshot(
        replace(seed_snapshot, worker=replace(seed_snapshot.worker, instance="", role=Role.UNIFIED))
    )
    snap = parse_probe_payload(doc, probe_target(worker="pod-7", role=Role.DECODE))
    assert (snap.worker.worker, snap.worker.role, snap.worker.instance) == ("pod-7", Role.DECODE, "pod-a")
    assert snap.worker.tp_rank == seed_snapshot.worker.tp_rank
    assert parse_probe_payload(dump_snapshot(seed_snapshot), probe_target()) == seed_snapshot


async def test_tripwires_come_through_with_their_slot_ids(seed_snapshot: Snapshot) -> None:
    wire = Tripwire(TripwireKind.FREE_DUPLICATE, Pool.MAMBA, (17,), "process_prefill_chunk", 48200)
    payload = dump_snapshot(replace(seed_snapshot, tripwires=(wire,)))
    (snap,) = await scrape(lambda _: httpx.Response(200, json=payload))
    assert snap.tripwires == (wire,)


def _raise(exc: Exception) -> Handler:
    def handle(request: httpx.Request) -> httpx.Response:
        raise exc

    return handle


def _versioned(seed: Snapshot, version: Any) -> dict[str, Any]:
    return {**dump_snapshot(seed), "version": version}


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda s: _raise(httpx.ReadTimeout("slow")), Reason.TIMEOUT),
        (lambda s: _raise(httpx.ConnectError("refused")), Reason.CONNECT),
        (lambda s: lambda _: httpx.Response(500, text="boom"), Reason.HTTP_STATUS),
        (lambda s: lambda _: httpx.Response(503, json={"error": "no snapshot yet"}), Reason.HTTP_STATUS),
        (lambda s: lambda _: httpx.Response(200, content=b"\x00\xff garbage"), Reason.DECODE),
        (lambda s: lambda _: httpx.Response(200, text="[" * 100_000), Reason.DECODE),
        (lambda s: lambda _: httpx.Response(200, json=[1, 2]), Reason.SCHEMA),
        (lambda s: lambda _: httpx.Response(200, json={**dump_snapshot(s), "seq": "x"}), Reason.SCHEMA),
        (lambda s: lambda _: httpx.Response(200, json=_versioned(s, 99)), Reason.VERSION),
        (lambda s: lambda _: httpx.Response(200, content=b" " * (11 << 20)), Reason.TOO_LARGE),
    ],
    ids=["timeout", "connect", "500", "503", "garbage", "nested", "list", "bad-field", "version", "10MB"],
)
async def test_each_broken_answer_fails_with_its_own_reason(
    make: Callable[[Snapshot], Handler], reason: Reason, seed_snapshot: Snapshot
) -> None:
    with pytest.raises(ScrapeError) as err:
        await scrape(make(seed_snapshot))
    assert err.value.reason is reason


async def test_a_body_larger_than_the_cap_is_refused_while_streaming() -> None:
    chunks_sent = []

    async def stream() -> Any:
        for _ in range(1000):
            chunks_sent.append(1)
            yield b"x" * 65536

    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=stream())

    with pytest.raises(ScrapeError) as err:
        await scrape(handle, max_bytes=1 << 20)
    assert err.value.reason is Reason.TOO_LARGE
    assert len(chunks_sent) < 50  # stopped reading soon after the cap, not after 64 MB
