"""A dead rank's last word: its final snapshot is stored the moment it can be read, and its target
reports down (issue 23: a crashed pod's probe targets read ``up`` for minutes).

* the scrape loop stores the snapshot a :class:`RankExited` carries and records the target down;
* a probe that stopped answering is looked at every ``FINAL_POLL_S`` while the loop backs off, and
  the back-off ends when its final file appears (a ``stat``; the file is read by the scrape);
* after a failure the final file is read before the next request (a hung rank's request would
  hold the last word for a whole timeout);
* a vanished rank's final source is read at once and reports down from its first read on.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import httpx

from poolwatch.codec.snapshot import dump_snapshot
from poolwatch.discovery.files import ensure_secret
from poolwatch.discovery.final import final_name, write_final
from poolwatch.errors import Reason
from poolwatch.model.snapshot import Snapshot
from poolwatch.settings.groups import ScrapeSettings
from poolwatch.sidecar.scraper import FINAL_POLL_S, Scraper
from poolwatch.sidecar.store import SnapshotStore
from poolwatch.sources.base import Source, Target
from poolwatch.sources.final import FinalSnapshotSource
from poolwatch.sources.probe_source import ProbeSource
from rigs.fakes.clock import FakeClock

NOW = 1_761_907_243.0


def leave_final(directory: Path, snap: Snapshot) -> Path:
    w = snap.worker
    name = final_name(w.worker, w.dp_rank, w.tp_rank, w.pp_rank)
    last = replace(snap, final=True, boot_id="boot-a", seq=snap.seq + 1, taken_at=NOW + 1)
    return write_final(directory, name, json.dumps(dump_snapshot(last)).encode(), ensure_secret(directory))


class Rank:
    """A probe endpoint that answers live until ``dead``, then refuses (or, ``hung``, times out)."""

    def __init__(self, snap: Snapshot, hung: bool = False) -> None:
        self.snap, self.hung = replace(snap, boot_id="boot-a"), hung
        self.dead = False
        self.requests = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        if not self.dead:
            return httpx.Response(200, json=dump_snapshot(self.snap))
        if self.hung:
            raise httpx.ReadTimeout("no answer", request=request)
        raise httpx.ConnectError("connection refused", request=request)


def probe_of(tmp_path: Path, snap: Snapshot) -> ProbeSource:
    w = snap.worker
    path = tmp_path / final_name(w.worker, w.dp_rank, w.tp_rank, w.pp_rank)
    target = Target("probe:p", "probe", "http://127.0.0.1:1")
    return ProbeSource(target, final_path=str(path), secret=ensure_secret(tmp_path))


def scraper(store: SnapshotStore, source: Source, clock: FakeClock) -> Scraper:
    return Scraper(store, [source], ScrapeSettings(scrape_interval=1.0, scrape_timeout=1.0), clock)


async def test_a_dead_probes_final_snapshot_is_stored_and_its_target_reports_down(
    tmp_path: Path, seed_snapshot: Snapshot, clock: FakeClock
) -> None:
    store, rank = SnapshotStore(clock=clock), Rank(seed_snapshot)
    source = probe_of(tmp_path, seed_snapshot)
    loop = scraper(store, source, clock)
    async with httpx.AsyncClient(transport=httpx.MockTransport(rank)) as client:
        assert await loop.scrape_once(source, client)
        rank.dead = True
        leave_final(tmp_path, seed_snapshot)
        assert not await loop.scrape_once(source, client)  # down, yet the last word is kept
        (latest,) = store.latest()
        assert latest.final
        assert latest.tripwires == seed_snapshot.tripwires
        (target,) = store.targets()
        assert not target.up
        assert target.errors[Reason.CONNECT] == 1
        assert "final snapshot" in target.last_error
        assert not await loop.scrape_once(source, client)  # and stays down
        assert not store.targets()[0].up


async def test_a_failing_probe_ends_its_back_off_when_its_final_file_appears(
    tmp_path: Path, seed_snapshot: Snapshot, clock: FakeClock
) -> None:
    store, rank = SnapshotStore(clock=clock), Rank(seed_snapshot)
    source = probe_of(tmp_path, seed_snapshot)
    steps: list[float] = []

    async def sleep(seconds: float) -> None:
        steps.append(seconds)
        if len(steps) == 3:  # the rank writes its final snapshot 0.3 s into the back-off, and dies
            leave_final(tmp_path, seed_snapshot)

    loop = Scraper(store, [source], ScrapeSettings(), clock, sleep=sleep)
    async with httpx.AsyncClient(transport=httpx.MockTransport(rank)) as client:
        await loop.scrape_once(source, client)
        assert not source.last_word_pending()  # answering: nothing to look for
        rank.dead = True
        await loop.scrape_once(source, client)  # refused, no final yet
        assert not source.last_word_pending()
        await loop.back_off(source, 16.0)
        assert steps == [FINAL_POLL_S] * 3  # not the 16 s back-off
        assert not await loop.scrape_once(source, client)
    assert store.latest()[0].final
    assert not source.last_word_pending()  # delivered: nothing more to look for


async def test_without_a_watch_the_back_off_is_one_sleep(seed_snapshot: Snapshot, clock: FakeClock) -> None:
    steps: list[float] = []

    async def sleep(seconds: float) -> None:
        steps.append(seconds)

    source = ProbeSource(Target("probe:p", "probe", "http://127.0.0.1:1"))
    loop = Scraper(SnapshotStore(clock=clock), [source], ScrapeSettings(), clock, sleep=sleep)
    await loop.back_off(source, 4.0, watch=False)
    assert steps == [4.0]


async def test_after_a_failure_a_hung_ranks_final_is_read_before_any_request(
    tmp_path: Path, seed_snapshot: Snapshot, clock: FakeClock
) -> None:
    store, rank = SnapshotStore(clock=clock), Rank(seed_snapshot, hung=True)
    source = probe_of(tmp_path, seed_snapshot)
    loop = scraper(store, source, clock)
    async with httpx.AsyncClient(transport=httpx.MockTransport(rank)) as client:
        await loop.scrape_once(source, client)
        rank.dead = True
        await loop.scrape_once(source, client)  # timed out
        leave_final(tmp_path, seed_snapshot)
        asked = rank.requests
        assert not await loop.scrape_once(source, client)
        assert rank.requests == asked  # no request waited out a timeout first
    assert store.latest()[0].final


async def test_a_vanished_ranks_final_source_reports_down_from_its_first_read(
    tmp_path: Path, seed_snapshot: Snapshot
) -> None:
    clock = FakeClock(NOW)
    path = leave_final(tmp_path, seed_snapshot)
    store = SnapshotStore(clock=clock)
    source = FinalSnapshotSource(
        Target("final:x", "probe", str(path), "prefill-0"), clock, ensure_secret(tmp_path), "boot-a"
    )
    loop = scraper(store, source, clock)
    async with httpx.AsyncClient() as client:
        assert not await loop.scrape_once(source, client)
        assert not await loop.scrape_once(source, client)
    assert store.latest()[0].final
    (target,) = store.targets()
    assert (target.up, target.worker) == (False, "prefill-0")
