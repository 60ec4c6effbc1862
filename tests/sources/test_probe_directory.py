"""The probe directory is opened once, after checking every directory above it, and read and
written relative to that handle; a swap is seen and exported, never followed.

Before: the directory was checked by path at each scan, so a neighbour who could rename it (a
world-writable parent without the sticky bit, as a Kubernetes emptyDir's root) swapped in its own:
the sidecar dropped every probe target without an alert and refused the dying rank's final.
The hostile tier (tests/hostile/test_hostile_neighbours.py) runs the same as uid nobody.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from poolwatch.discovery.directory import scan_discovery_dir
from poolwatch.discovery.entry import DiscoveryEntry, write_discovery
from poolwatch.discovery.files import ensure_secret
from poolwatch.discovery.final import final_name, read_final, write_final
from poolwatch.discovery.handle import DirectoryHandle, held
from poolwatch.discovery.safety import UnsafePathError, check_ancestors, make_directory
from poolwatch.sources.probe_dir import ProbeDirectoryWatch

ENTRY = DiscoveryEntry("http://127.0.0.1:4000", 7, "w", 0, 0, 0, "boot-a", 1761907243.0)


def shared(tmp_path: Path, mode: int = 0o777) -> Path:
    """A directory like a Kubernetes emptyDir's root: this user's, world-writable, not sticky."""
    folder = tmp_path / "volume"
    folder.mkdir()
    folder.chmod(mode)
    return folder


def test_making_the_probe_directory_in_a_world_writable_parent_of_ours_makes_the_parent_sticky(
    tmp_path: Path,
) -> None:
    volume = shared(tmp_path)
    make_directory(volume / "probe")
    assert stat.S_IMODE(volume.stat().st_mode) == 0o1777
    check_ancestors(volume / "probe")  # now no one else may rename what is in it


def test_a_world_writable_ancestor_without_the_sticky_bit_is_refused_naming_it(tmp_path: Path) -> None:
    volume = shared(tmp_path)
    (volume / "probe").mkdir()
    with pytest.raises(UnsafePathError, match=r"volume: writable by group or others without the sticky bit"):
        DirectoryHandle.open(volume / "probe")
    entries, problems = scan_discovery_dir(volume / "probe")
    assert entries == []
    assert next(iter(problems.values())).startswith("unsafe: ")


def test_a_swapped_directory_is_not_read_the_one_opened_is_and_the_swap_is_reported(tmp_path: Path) -> None:
    volume = shared(tmp_path, 0o755)
    probe_dir = volume / "probe"
    write_discovery(probe_dir, ENTRY)
    secret = ensure_secret(probe_dir)
    watch = ProbeDirectoryWatch(str(probe_dir))
    assert (len(scan_discovery_dir(probe_dir)[0]), watch.observe(1)) == (1, "ok")

    probe_dir.rename(volume / "moved")  # the swap: another directory at the path
    (volume / "probe").mkdir()
    (volume / "probe" / "planted-dp0-tp0-pp0.json").write_text('{"url": "http://127.0.0.1:1"}')
    entries, problems = scan_discovery_dir(probe_dir)
    assert [e.url for e in entries] == [ENTRY.url]  # still the directory the probes write in
    assert problems == {}
    assert watch.observe(1) == "unsafe"
    assert watch.lost() == {"unsafe": 1, "missing": 0}

    name = final_name("w", 0, 0, 0)  # the dying rank's last word reaches the sidecar all the same
    write_final(probe_dir, name, b'{"final": true}', secret)
    assert read_final(probe_dir / name, secret) == {"final": True}
    assert (volume / "moved" / name).exists()
    assert not (volume / "probe" / name).exists()


def test_a_directory_made_writable_by_others_after_it_was_opened_is_refused_until_mended(
    tmp_path: Path,
) -> None:
    probe_dir = tmp_path / "probe"
    write_discovery(probe_dir, ENTRY)
    assert scan_discovery_dir(probe_dir)[0]
    probe_dir.chmod(0o777)
    entries, problems = scan_discovery_dir(probe_dir)
    assert entries == []
    assert "writable by group or others" in problems[str(probe_dir)]
    probe_dir.chmod(0o755)
    assert scan_discovery_dir(probe_dir)[0]


def test_a_removed_directory_is_missing_and_one_made_again_is_opened_again(tmp_path: Path) -> None:
    probe_dir = tmp_path / "probe"
    write_discovery(probe_dir, ENTRY)
    watch = ProbeDirectoryWatch(str(probe_dir))
    assert watch.observe(len(scan_discovery_dir(probe_dir)[0])) == "ok"
    for child in probe_dir.iterdir():
        child.unlink()
    probe_dir.rmdir()
    assert watch.observe(len(scan_discovery_dir(probe_dir)[0])) == "missing"
    assert watch.lost() == {"unsafe": 0, "missing": 1}
    write_discovery(probe_dir, ENTRY)  # the probes make it again
    assert watch.observe(len(scan_discovery_dir(probe_dir)[0])) == "ok"
    assert held(probe_dir).identity == (os.stat(probe_dir).st_dev, os.stat(probe_dir).st_ino)


def test_a_directory_that_never_had_probes_is_not_reported_lost(tmp_path: Path) -> None:
    watch = ProbeDirectoryWatch(str(tmp_path / "never"))
    assert watch.observe(0) == "missing"
    assert watch.lost() == {"unsafe": 0, "missing": 0}


def test_an_ancestor_that_is_a_link_is_followed_and_its_target_checked(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "probe").mkdir(parents=True)
    (tmp_path / "link").symlink_to(real)
    handle = DirectoryHandle.open(tmp_path / "link" / "probe")
    assert handle.identity[1] == os.stat(real / "probe").st_ino
    handle.close()
    (real / "probe").rmdir()
    (real / "elsewhere").mkdir()
    (real / "probe").symlink_to(real / "elsewhere")  # the directory itself a link: refused
    with pytest.raises(UnsafePathError, match=r"a symbolic link"):
        DirectoryHandle.open(real / "probe").close()
