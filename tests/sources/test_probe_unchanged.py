"""The long-poll's "nothing changed" answer: a probe whose content is what the sidecar holds sends
its clock alone (a bodiless 304), and the sidecar renews its snapshot without decoding a body.
Both mixed versions still work: an old sidecar never asks, an old probe never answers that way."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from tests.fleet_helpers import RouteProbe

from poolwatch.codec.renewal import CLOCK_HEADER, clock_header, content_tag, renew
from poolwatch.codec.snapshot import dump_snapshot, parse_snapshot
from poolwatch.discovery.directory import read_discovery_dir
from poolwatch.errors import PayloadError, Reason
from poolwatch.model.rank import SourceKind
from poolwatch.model.snapshot import ProbeHealth, Snapshot
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.publication import Publication
from poolwatch.probe.endpoint.messages import Response, parse_head
from poolwatch.probe.endpoint.routes import Context, answer
from poolwatch.probe.lifecycle import attach, detach
from poolwatch.probe.sglang.engine import SGLANG
from poolwatch.sources.base import Target
from poolwatch.sources.probe_source import ProbeSource
from poolwatch.sources.wire import WireClient
from rigs.fakes.sglang import Rank

PORT = 41234
TARGET = Target(name="rank0", source=SourceKind.PROBE, location=f"http://127.0.0.1:{PORT}", worker="w0")


def probed(seed: Snapshot) -> Snapshot:
    return replace(seed, probe=ProbeHealth(samples_total=7, sample_cost_seconds=1e-4, census_total=2))


def later(snap: Snapshot, steps: int = 1) -> Snapshot:
    """The same figures ``steps`` samples later: only the clock moved."""
    assert snap.probe is not None
    probe = replace(snap.probe, samples_total=snap.probe.samples_total + steps, sample_cost_seconds=2e-4)
    return replace(snap, seq=snap.seq + steps, taken_at=snap.taken_at + steps, probe=probe)


def tag(snap: Snapshot) -> str:
    return content_tag(dump_snapshot(snap))


# -- the contract ---------------------------------------------------------------------------------


def test_the_content_tag_ignores_the_clock_and_sees_any_other_change(seed_snapshot: Snapshot) -> None:
    snap = probed(seed_snapshot)
    assert tag(later(snap, 5)) == tag(snap)
    assert snap.probe is not None
    changed = [
        replace(snap, queues={**snap.queues, "waiting": 99}),
        replace(snap, probe=replace(snap.probe, errors_total=1, last_error="boom")),
        replace(snap, boot_id="another-life"),
        replace(snap, final=True),
    ]
    assert len({tag(s) for s in changed} | {tag(snap)}) == len(changed) + 1


def test_a_renewed_snapshot_is_exactly_what_the_full_answer_decodes_to(seed_snapshot: Snapshot) -> None:
    held = parse_snapshot(json.loads(json.dumps(dump_snapshot(probed(seed_snapshot)))))
    now = later(probed(seed_snapshot), 3)
    assert renew(held, clock_header(now)) == parse_snapshot(json.loads(json.dumps(dump_snapshot(now))))


@pytest.mark.parametrize(
    "header",
    ["", "seq=1", "taken_at=1.5", "seq=x taken_at=1.5", "seq=1 taken_at=nan", "seq=-1 taken_at=1.5",
     "seq=1 taken_at=1.5 colour=red", "seq=1 taken_at=" + "9" * 600,
     # issue 24 item 4: the snapshot's own limits hold for the clock too, with a bounded reason
     f"seq={10**300} taken_at=1.5", "seq=1 taken_at=1e300", f"seq={10**400} taken_at=1.5",
     f"seq={2**53 + 1} taken_at=1.5", "seq=1 taken_at=1.5 sample_cost_seconds=inf",
     "seq=1 taken_at=1.5 samples_total=1e3"],
)  # fmt: skip
def test_a_clock_header_that_is_not_a_clock_is_refused(seed_snapshot: Snapshot, header: str) -> None:
    with pytest.raises(ValueError, match=CLOCK_HEADER) as refused:
        renew(seed_snapshot, header)
    assert len(str(refused.value)) < 300


# -- the probe's route ----------------------------------------------------------------------------


def context(snap: Snapshot) -> Context:
    publication = Publication()
    publication.publish(snap)
    return Context(RouteProbe(publication), publication, PORT, None)


def get(ctx: Context, query: str) -> Response:
    head = f"GET /v1/snapshot?{query} HTTP/1.1\r\nHost: 127.0.0.1:{PORT}".encode()
    return answer(parse_head(head, "127.0.0.1"), ctx)


def test_a_client_that_sends_no_tag_gets_the_whole_snapshot_labelled_with_its_tag(
    seed_snapshot: Snapshot,
) -> None:
    snap = probed(seed_snapshot)
    response = get(context(snap), "sig=x&wait=0")  # what an older sidecar asks
    assert response.status == 200
    assert parse_snapshot(json.loads(response.doc)) == snap
    assert dict(response.headers)["ETag"] == f'"{tag(snap)}"'


def test_the_content_the_client_holds_is_answered_with_a_bodiless_304_and_the_new_clock(
    seed_snapshot: Snapshot,
) -> None:
    snap = probed(seed_snapshot)
    ctx = context(snap)
    ctx.publication.publish(later(snap, 2))
    response = get(ctx, f"sig=x&wait=0&have={tag(snap)}")
    assert response.status == 304
    assert dict(response.headers)[CLOCK_HEADER] == clock_header(later(snap, 2))
    wire = response.encode(keep_alive=True)
    assert wire.endswith(b"\r\n\r\n")
    assert b"Content-Length" not in wire
    assert b"Connection: keep-alive" in wire


def test_changed_content_is_sent_in_full_whatever_tag_the_client_holds(seed_snapshot: Snapshot) -> None:
    snap = probed(seed_snapshot)
    ctx = context(snap)
    busier = replace(later(snap), queues={**snap.queues, "waiting": 42})
    ctx.publication.publish(busier)
    response = get(ctx, f"sig=x&wait=0&have={tag(snap)}")
    assert response.status == 200
    assert parse_snapshot(json.loads(response.doc)) == busier


# -- the sidecar's probe source against new and old probes --------------------------------------


def probe_transport(ctx: Context, seen: list[dict[str, str]]) -> httpx.MockTransport:
    """The real route behind a mock transport; each request finds a new sample of the same figures."""

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(dict(request.url.params))
        latest = ctx.publication.latest
        assert latest is not None
        ctx.publication.publish(later(latest))
        head = f"GET {request.url.raw_path.decode()} HTTP/1.1\r\nHost: 127.0.0.1:{PORT}".encode()
        response = answer(parse_head(head, "127.0.0.1"), ctx)
        return httpx.Response(response.status, headers=dict(response.headers), content=response.doc)

    return httpx.MockTransport(handle)


async def test_a_watch_decodes_one_body_then_renews_its_snapshot_from_each_clock(
    seed_snapshot: Snapshot,
) -> None:
    ctx = context(probed(seed_snapshot))
    seen: list[dict[str, str]] = []
    source = ProbeSource(TARGET, long_poll_s=0.001)
    async with httpx.AsyncClient(transport=probe_transport(ctx, seen)) as client:
        got = [(await source.scrape(client))[0] for _ in range(4)]
    assert ["have" in params for params in seen] == [False, True, True, True]
    assert [s.seq for s in got] == [seed_snapshot.seq + n for n in (1, 2, 3, 4)]
    latest = ctx.publication.latest
    assert latest is not None
    assert got[-1] == replace(latest, worker=got[0].worker)  # the probe's latest, with the target's identity


async def test_an_older_probe_that_sends_no_tag_is_read_in_full_every_time(seed_snapshot: Snapshot) -> None:
    seen: list[dict[str, str]] = []
    snaps = [later(probed(seed_snapshot), n) for n in range(3)]

    def old_probe(request: httpx.Request) -> httpx.Response:
        seen.append(dict(request.url.params))
        return httpx.Response(200, content=json.dumps(dump_snapshot(snaps[len(seen) - 1])))

    source = ProbeSource(TARGET, long_poll_s=0.001)
    async with httpx.AsyncClient(transport=httpx.MockTransport(old_probe)) as client:
        got = [(await source.scrape(client))[0] for _ in range(3)]
    assert not any("have" in params for params in seen)
    assert [s.seq for s in got] == [s.seq for s in snaps]


async def test_a_304_with_a_broken_clock_fails_that_scrape_and_the_next_asks_in_full(
    seed_snapshot: Snapshot,
) -> None:
    ctx = context(probed(seed_snapshot))
    seen: list[dict[str, str]] = []
    real = probe_transport(ctx, seen)

    async def broken_clock(request: httpx.Request) -> httpx.Response:
        response = await real.handle_async_request(request)
        if response.status_code == 304 and len(seen) == 2:
            return httpx.Response(304, headers={CLOCK_HEADER: "seq=soon taken_at=later"})
        return response

    source = ProbeSource(TARGET, long_poll_s=0.001)
    async with httpx.AsyncClient(transport=httpx.MockTransport(broken_clock)) as client:
        await source.scrape(client)
        with pytest.raises(PayloadError) as failed:
            await source.scrape(client)
        assert failed.value.reason is Reason.SCHEMA
        await source.scrape(client)
    assert ["have" in params for params in seen] == [False, True, False]


# -- over the wire: the real probe endpoint and a watch lane's client ----------------------------


async def test_a_real_probe_answers_a_lane_with_a_bodiless_304_on_the_same_kept_alive_connection(
    tmp_path: Path,
) -> None:
    rank = Rank(mamba_first_id=1)
    attach(SGLANG, rank.sched, ProbeConfig(sample_interval_s=0.0, directory=str(tmp_path), worker="pod-a"))
    try:
        rank.sched.recv_requests()  # one sample published
        (entry,) = read_discovery_dir(tmp_path)
        url = entry.url + "/v1/snapshot"
        async with WireClient() as lane:
            status, headers, body = await lane.answer(url, 1 << 20)
            have = headers["etag"].strip('"')
            opened = lane._stream
            again = await lane.answer(f"{url}?have={have}", 1 << 20, frozenset({304}))
            assert lane._stream is opened  # no new connection for the bodiless answer
            third = await lane.answer(url, 1 << 20)
    finally:
        detach(rank.sched)
    snap = parse_snapshot(json.loads(body))
    assert (status, again[0], again[2]) == (200, 304, b"")
    assert renew(snap, again[1][CLOCK_HEADER.lower()]) == parse_snapshot(json.loads(third[2]))
