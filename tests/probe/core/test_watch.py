"""Long-polling the probe: the answer comes early only when the alert signature changes."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from typing import Any

import httpx
import pytest

from poolwatch.codec.snapshot import dump_snapshot
from poolwatch.conservation import signature
from poolwatch.model.snapshot import Snapshot
from poolwatch.probe.core.publication import Publication
from poolwatch.probe.endpoint.messages import BadRequest
from poolwatch.probe.endpoint.routes import MAX_WAIT_S, wait_of
from poolwatch.sources.base import Target
from poolwatch.sources.probe_source import ProbeSource


def published(snap: Snapshot | None) -> Publication:
    pub = Publication()
    pub.publish(snap)
    return pub


def test_a_changed_signature_is_answered_at_once_even_with_a_long_wait(seed_snapshot: Snapshot) -> None:
    assert published(seed_snapshot).wait_changed("old", 30) is seed_snapshot  # returns immediately


def test_an_unchanged_signature_waits_out_the_deadline(seed_snapshot: Snapshot) -> None:
    assert published(seed_snapshot).wait_changed(signature(seed_snapshot), 0) is seed_snapshot


def test_no_snapshot_yet_gives_none_after_the_wait() -> None:
    assert published(None).wait_changed("", 0) is None


def test_a_waiting_long_poll_is_woken_by_the_next_publish(seed_snapshot: Snapshot) -> None:
    pub = published(seed_snapshot)
    tripped = replace(seed_snapshot, boot_id="restarted")
    got: list[Snapshot | None] = []
    waiter = threading.Thread(target=lambda: got.append(pub.wait_changed(signature(seed_snapshot), 30)))
    waiter.start()
    pub.publish(tripped)
    waiter.join(timeout=10)
    assert got == [tripped]


def test_closing_the_publication_releases_every_waiter(seed_snapshot: Snapshot) -> None:
    pub = published(seed_snapshot)
    got: list[Snapshot | None] = []
    waiters = [
        threading.Thread(target=lambda: got.append(pub.wait_changed(signature(seed_snapshot), 30)))
        for _ in range(3)
    ]
    for w in waiters:
        w.start()
    pub.close()
    for w in waiters:
        w.join(timeout=10)
    assert got == [seed_snapshot] * 3


@pytest.mark.parametrize(
    ("query", "expected"),
    [("sig=a&wait=5", ("a", 5.0)), ("wait=-3", ("", 0.0)), ("wait=1e308", ("", MAX_WAIT_S)), ("", ("", 0.0))],
)
def test_every_wait_is_clamped_to_a_finite_range(query: str, expected: tuple[str, float]) -> None:
    assert wait_of(query) == expected


@pytest.mark.parametrize("wait", ["nan", "inf", "-inf", "soon"])
def test_a_non_finite_or_malformed_wait_is_a_bad_request(wait: str) -> None:
    with pytest.raises(BadRequest, match="wait"):
        wait_of(f"wait={wait}")


def test_the_signature_changes_with_a_pool_balance_or_a_tripwire_but_not_with_traffic(
    seed_snapshot: Snapshot,
) -> None:
    busier = replace(seed_snapshot, seq=seed_snapshot.seq + 100, queues={"running": 7})
    assert signature(busier) == signature(seed_snapshot)
    healed = {p: replace(a, available=a.available - 1) if p.value == "mamba" and a.available else a
              for p, a in seed_snapshot.pools.items()}  # fmt: skip
    assert signature(replace(seed_snapshot, pools=healed)) != signature(seed_snapshot)
    assert signature(replace(seed_snapshot, boot_id="other")) != signature(seed_snapshot)


async def test_the_probe_source_sends_back_the_signature_it_last_saw(seed_snapshot: Snapshot) -> None:
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(dict(request.url.params))
        return httpx.Response(200, content=json.dumps(dump_snapshot(seed_snapshot)))

    source = ProbeSource(Target("probe:x", "probe", "http://probe"), long_poll_s=0.5)
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        await source.scrape(client)
        await source.scrape(client)
    assert seen == [{"sig": "", "wait": "0.5"}, {"sig": signature(seed_snapshot), "wait": "0.5"}]
    assert source.long_poll


async def test_a_long_poll_the_probe_refuses_falls_back_to_the_latest_snapshot(
    seed_snapshot: Snapshot,
) -> None:
    """A hostile local client holding the probe's long-poll slots cannot silence the sidecar."""
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(dict(request.url.params))
        if "wait" in request.url.params:
            return httpx.Response(503, json={"error": "too many long-polls; retry"})
        return httpx.Response(200, content=json.dumps(dump_snapshot(seed_snapshot)))

    source = ProbeSource(Target("probe:x", "probe", "http://probe"), long_poll_s=0.01)
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        (snap,) = await source.scrape(client)
    assert snap.seq == seed_snapshot.seq
    assert seen == [{"sig": "", "wait": "0.01"}, {}]
