"""Long-polling the probe: the answer comes early only when the alert signature changes."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import httpx
import pytest

from poolwatch.codec import dump_snapshot
from poolwatch.conservation import signature
from poolwatch.model import Snapshot
from poolwatch.probe.server import watch
from poolwatch.sources.base import Target
from poolwatch.sources.probe import ProbeSource


class Holder:
    def __init__(self, latest: Snapshot | None) -> None:
        self.latest = latest


def test_a_changed_signature_is_answered_at_once_even_with_a_long_wait(seed_snapshot: Snapshot) -> None:
    assert watch(Holder(seed_snapshot), "sig=old&wait=30") is seed_snapshot  # returns immediately


def test_an_unchanged_signature_waits_out_the_deadline(seed_snapshot: Snapshot) -> None:
    query = str(httpx.QueryParams({"sig": signature(seed_snapshot), "wait": "0"}))
    assert watch(Holder(seed_snapshot), query) is seed_snapshot


def test_no_snapshot_yet_gives_none_after_the_wait() -> None:
    assert watch(Holder(None), "wait=0") is None


def test_a_malformed_wait_is_a_value_error(seed_snapshot: Snapshot) -> None:
    with pytest.raises(ValueError, match="could not convert"):
        watch(Holder(seed_snapshot), "wait=soon")


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
