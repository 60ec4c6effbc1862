"""A vanished rank's final snapshot reaches the sidecar: through its probe source, or on its own;
either way the rank's target reports down (:class:`RankExited` carries the last word)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from poolwatch.codec.snapshot import dump_snapshot
from poolwatch.discovery.entry import DiscoveryEntry, write_discovery
from poolwatch.discovery.files import ensure_secret
from poolwatch.discovery.final import final_name, write_final
from poolwatch.errors import ScrapeError
from poolwatch.model.snapshot import Snapshot
from poolwatch.settings.sidecar import Settings
from poolwatch.sources.base import Target
from poolwatch.sources.final import FinalSnapshotSource, RankExited
from poolwatch.sources.probe_source import ProbeSource
from poolwatch.sources.targets import TargetSet
from rigs.fakes.clock import FakeClock

NOW = 1_761_907_243.0


def final_of(snap: Snapshot, boot: str = "boot-a") -> Snapshot:
    return replace(snap, final=True, boot_id=boot, taken_at=NOW - 1)


def leave_final(directory: Path, snap: Snapshot) -> Path:
    w = snap.worker
    name = final_name(w.worker, w.dp_rank, w.tp_rank, w.pp_rank)
    return write_final(directory, name, json.dumps(dump_snapshot(snap)).encode(), ensure_secret(directory))


def announce(directory: Path, snap: Snapshot, boot: str = "boot-a") -> Path:
    w = snap.worker
    return write_discovery(
        directory, DiscoveryEntry("http://127.0.0.1:41234", 1, w.worker, 0, 0, 0, boot, NOW)
    )


async def last_word(source: ProbeSource | FinalSnapshotSource, client: httpx.AsyncClient) -> list[Snapshot]:
    """What one scrape of a gone rank hands over (it always fails: the target is down)."""
    with pytest.raises(RankExited) as gone:
        await source.scrape(client)
    return list(gone.value.last_word)


async def test_a_probe_that_stops_answering_hands_over_its_final_snapshot_once(
    tmp_path: Path, seed_snapshot: Snapshot
) -> None:
    live = replace(seed_snapshot, boot_id="boot-a")
    path = leave_final(tmp_path, final_of(seed_snapshot))
    answers = [httpx.Response(200, json=dump_snapshot(live))]

    def handle(request: httpx.Request) -> httpx.Response:
        if answers:
            return answers.pop()
        raise httpx.ConnectError("connection refused", request=request)

    target = Target("probe:p", "probe", "http://127.0.0.1:1")
    source = ProbeSource(target, final_path=str(path), secret=ensure_secret(tmp_path))
    async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as client:
        assert (await source.scrape(client))[0].final is False
        (last,) = await last_word(source, client)
        assert last.final
        assert last.tripwires == seed_snapshot.tripwires
        with pytest.raises(ScrapeError):
            await source.scrape(client)


async def test_a_final_snapshot_of_an_earlier_life_is_not_handed_over(
    tmp_path: Path, seed_snapshot: Snapshot
) -> None:
    path = leave_final(tmp_path, final_of(seed_snapshot, boot="earlier"))
    answers = [httpx.Response(200, json=dump_snapshot(replace(seed_snapshot, boot_id="now")))]

    def handle(request: httpx.Request) -> httpx.Response:
        if answers:
            return answers.pop()
        raise httpx.ConnectError("connection refused", request=request)

    source = ProbeSource(Target("probe:p", "probe", "http://127.0.0.1:1"), final_path=str(path))
    async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as client:
        await source.scrape(client)
        with pytest.raises(ScrapeError):
            await source.scrape(client)


async def test_a_vanished_ranks_final_file_becomes_a_source_that_delivers_it_once(
    tmp_path: Path, seed_snapshot: Snapshot
) -> None:
    leave_final(tmp_path, final_of(seed_snapshot))
    targets = TargetSet(Settings.from_env({"POOLWATCH_PROBE_DIR": str(tmp_path)}), FakeClock(NOW))
    alive = announce(tmp_path, seed_snapshot)
    assert [type(s) for s in targets.current()] == [ProbeSource]
    alive.unlink()  # seen alive, then gone (the process removed its discovery file)
    (source,) = targets.current()
    assert isinstance(source, FinalSnapshotSource)
    assert source.last_word_pending()  # read at once, without the scrape loop's spread
    async with httpx.AsyncClient() as client:
        (snap,) = await last_word(source, client)
        assert snap.final
        assert await last_word(source, client) == []
    assert not source.last_word_pending()
    assert targets.current() == [source]
    assert source.target.worker == seed_snapshot.worker.worker  # its TargetDown names the worker


def test_a_rank_that_still_announces_itself_is_read_through_its_probe(
    tmp_path: Path, seed_snapshot: Snapshot
) -> None:
    leave_final(tmp_path, final_of(seed_snapshot))
    w = seed_snapshot.worker
    write_discovery(tmp_path, DiscoveryEntry("http://127.0.0.1:41234", 1, w.worker, 0, 0, 0, "boot-a", NOW))
    targets = TargetSet(Settings.from_env({"POOLWATCH_PROBE_DIR": str(tmp_path)}), FakeClock(NOW))
    assert [type(s) for s in targets.current()] == [ProbeSource]


async def test_an_old_final_snapshot_is_old_news(tmp_path: Path, seed_snapshot: Snapshot) -> None:
    path = leave_final(tmp_path, final_of(seed_snapshot))
    target = Target("final:x", "probe", str(path))
    source = FinalSnapshotSource(target, FakeClock(NOW + 3600), ensure_secret(tmp_path), "boot-a")
    async with httpx.AsyncClient() as client:
        assert await last_word(source, client) == []
