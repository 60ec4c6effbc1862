"""Nothing in the discovery directory is trusted unless only this user or root could have written
it, and a final snapshot pages only when signed, dated and of a boot this sidecar saw (issue 24
items 1-3).  The same attacks by a real second user are in tests/hostile/test_local_user.py."""

from __future__ import annotations

import json
import os
import stat
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from poolwatch.codec.snapshot import dump_snapshot
from poolwatch.discovery.directory import SkipReason, scan_discovery_dir
from poolwatch.discovery.entry import DiscoveryEntry, write_discovery
from poolwatch.discovery.files import SECRET_FILE, ensure_secret, load_secret, read_secret
from poolwatch.discovery.final import ForgedFinalError, final_name, read_final, sign_final, write_final
from poolwatch.discovery.safety import UnsafePathError, default_directory
from poolwatch.errors import PayloadError
from poolwatch.model.snapshot import Snapshot
from poolwatch.settings.sidecar import Settings
from poolwatch.sources.base import Target
from poolwatch.sources.final import FinalSnapshotSource, RankExited
from poolwatch.sources.targets import TargetSet
from rigs.fakes.clock import FakeClock

NOW = 1_761_907_243.0
ENTRY = DiscoveryEntry("http://127.0.0.1:4000", 7, "w", 0, 0, 0, "boot-a", NOW)


def targets(directory: Path, now: float = NOW) -> TargetSet:
    return TargetSet(Settings.from_env({"POOLWATCH_PROBE_DIR": str(directory)}), FakeClock(now))


def test_a_world_writable_directory_is_refused_whole(tmp_path: Path) -> None:
    write_discovery(tmp_path, ENTRY)
    ensure_secret(tmp_path)
    tmp_path.chmod(0o777)
    entries, problems = scan_discovery_dir(tmp_path)
    assert entries == []
    (problem,) = problems.values()
    assert problem.startswith("unsafe: ")
    assert "writable by group or others" in problem
    with pytest.raises(UnsafePathError):
        ensure_secret(tmp_path)  # the probe adopts no secret there...
    with pytest.raises(UnsafePathError):
        write_discovery(tmp_path, ENTRY)  # ...and announces nothing
    assert read_secret(tmp_path) is None
    found = targets(tmp_path)
    assert found.current() == []
    assert found.skipped_by_reason()[SkipReason.UNSAFE] == 1


def test_a_secret_others_may_read_or_write_is_never_adopted(tmp_path: Path) -> None:
    (tmp_path / SECRET_FILE).write_text("ab" * 32)
    (tmp_path / SECRET_FILE).chmod(0o644)
    with pytest.raises(UnsafePathError, match="readable by others"):
        ensure_secret(tmp_path)
    with pytest.raises(UnsafePathError):
        load_secret(tmp_path)
    found = targets(tmp_path)
    found.current()
    assert found.skipped_by_reason()[SkipReason.UNSAFE] == 1
    (tmp_path / SECRET_FILE).chmod(0o600)
    assert ensure_secret(tmp_path) == "ab" * 32


def test_the_probe_creates_its_directory_and_secret_private(tmp_path: Path) -> None:
    folder = tmp_path / "new"
    ensure_secret(folder)
    assert stat.S_IMODE(os.stat(folder).st_mode) & 0o022 == 0
    assert stat.S_IMODE(os.stat(folder / SECRET_FILE).st_mode) == 0o600


def test_a_set_group_id_directory_shares_the_secret_with_its_group_only(tmp_path: Path) -> None:
    tmp_path.chmod(0o2750)
    ensure_secret(tmp_path)
    assert stat.S_IMODE(os.stat(tmp_path / SECRET_FILE).st_mode) == 0o640


def test_the_default_directory_is_outside_tmp_where_it_can_be(tmp_path: Path) -> None:
    run, xdg = tmp_path / "run", tmp_path / "xdg"
    run.mkdir()
    xdg.mkdir()
    environ = {"XDG_RUNTIME_DIR": str(xdg)}
    assert default_directory(environ, lambda p: True, str(run)) == str(run / "poolwatch")
    assert default_directory(environ, lambda p: p == str(xdg), str(run)) == str(xdg / "poolwatch")
    assert default_directory({}, lambda p: False, str(run)) == "/tmp/poolwatch"


def leave(directory: Path, snap: Snapshot, secret: str) -> Path:
    name = final_name(snap.worker.worker, 0, 0, 0)
    return write_final(directory, name, json.dumps(dump_snapshot(snap)).encode(), secret)


def final(seed: Snapshot, taken_at: float = NOW - 1) -> Snapshot:
    worker = replace(seed.worker, worker="w", dp_rank=0, tp_rank=0, pp_rank=0)
    return replace(seed, worker=worker, final=True, boot_id="boot-a", taken_at=taken_at)


def seen_then_gone(directory: Path, found: TargetSet) -> None:
    alive = write_discovery(directory, ENTRY)
    found.current()
    alive.unlink()


def test_an_unsigned_or_wrongly_signed_final_is_refused(tmp_path: Path, seed_snapshot: Snapshot) -> None:
    secret = ensure_secret(tmp_path)
    path = leave(tmp_path, final(seed_snapshot), "cd" * 32)
    with pytest.raises(ForgedFinalError):
        read_final(path, secret)
    path.write_bytes(json.dumps(dump_snapshot(final(seed_snapshot))).encode())  # no signature at all
    with pytest.raises(ForgedFinalError):
        read_final(path, secret)
    path.write_bytes(sign_final(secret, "other-dp0-tp0-pp0.final", b"{}"))  # signed for another rank
    with pytest.raises(ForgedFinalError):
        read_final(path, secret)
    found = targets(tmp_path)
    seen_then_gone(tmp_path, found)
    assert found.current() == []
    assert found.skipped_by_reason()[SkipReason.FORGED] == 1


async def test_a_future_dated_final_is_refused_and_counted(tmp_path: Path, seed_snapshot: Snapshot) -> None:
    secret = ensure_secret(tmp_path)
    path = leave(tmp_path, final(seed_snapshot, taken_at=NOW + 86_400), secret)
    found = targets(tmp_path)
    seen_then_gone(tmp_path, found)
    assert found.current() == []
    assert found.skipped_by_reason()[SkipReason.FORGED] == 1
    source = FinalSnapshotSource(Target("final:w", "probe", str(path)), FakeClock(NOW), secret, "boot-a")
    async with httpx.AsyncClient() as client:
        with pytest.raises(PayloadError, match="in the future"):
            await source.scrape(client)


async def test_a_final_is_delivered_once_and_not_replayed_after_a_sidecar_restart(
    tmp_path: Path, seed_snapshot: Snapshot
) -> None:
    leave(tmp_path, final(seed_snapshot), ensure_secret(tmp_path))
    found = targets(tmp_path)
    seen_then_gone(tmp_path, found)
    (source,) = found.current()
    async with httpx.AsyncClient() as client:
        with pytest.raises(RankExited) as first:
            await source.scrape(client)
        assert len(first.value.last_word) == 1
        with pytest.raises(RankExited) as second:  # the rank stays gone, its last word told once
            await source.scrape(client)
        assert second.value.last_word == ()
    restarted = targets(tmp_path)  # a new sidecar never saw boot-a announced
    assert restarted.current() == []
    assert restarted.skipped_by_reason()[SkipReason.FORGED] == 0  # inert, not an attack
