"""A hostile discovery directory: FIFOs, devices, huge files, forged URLs and poisoned names are
skipped quickly with a reason (logged once), and the good probe beside them is still found."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from poolwatch.discovery import (
    DiscoveryEntry,
    discovery_name,
    ensure_secret,
    read_secret,
    scan_discovery_dir,
    write_discovery,
)
from poolwatch.settings import Settings
from poolwatch.sources.targets import TargetSet

GOOD = DiscoveryEntry("http://127.0.0.1:4000", 7, "good", 0, 0, 0, "b", 1.5)


def hostile(tmp_path: Path) -> dict[str, str]:
    """Write the good entry and one file per attack; returns {file name: expected reason}."""
    write_discovery(tmp_path, GOOD)
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    with open(tmp_path / "huge.json", "wb") as f:
        f.truncate(50 << 20)  # 50 MB, sparse
    doc = GOOD.to_json()
    (tmp_path / "metadata.json").write_text(json.dumps({**doc, "url": "http://169.254.169.254/latest"}))
    (tmp_path / "remote.json").write_text(json.dumps({**doc, "url": "http://10.0.0.9:4000"}))
    (tmp_path / "surrogate.json").write_text(json.dumps({**doc, "worker": "w\ud800"}))
    (tmp_path / "bigint.json").write_text(json.dumps({**doc, "pid": 10**400}))
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    return {
        "fifo.json": "not a regular file",
        "zero.json": "",  # O_NOFOLLOW: refused as a link
        "huge.json": "larger than",
        "metadata.json": "not a loopback address",
        "remote.json": "not a loopback address",
        "surrogate.json": "lone surrogate",
        "bigint.json": "pid: expected 0..",
        "deep.json": "",
    }


def test_every_hostile_file_is_skipped_with_a_reason_and_the_good_one_is_found(tmp_path: Path) -> None:
    expected = hostile(tmp_path)
    entries, problems = scan_discovery_dir(tmp_path)
    assert entries == [GOOD]
    assert set(problems) == set(expected)
    for name, reason in expected.items():
        assert reason in problems[name], (name, problems[name])
        assert len(problems[name]) <= 200


def test_a_remote_url_is_followed_only_when_explicitly_allowed(tmp_path: Path) -> None:
    write_discovery(tmp_path, GOOD)
    (tmp_path / "remote.json").write_text(json.dumps({**GOOD.to_json(), "url": "http://10.0.0.9:4000"}))
    assert len(scan_discovery_dir(tmp_path)[0]) == 1
    assert len(scan_discovery_dir(tmp_path, allow_remote=True)[0]) == 2


def test_the_sidecar_logs_each_skipped_file_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    hostile(tmp_path)
    targets = TargetSet(
        Settings.from_env({"POOLWATCH_WORKER": "t", "POOLWATCH_PROBE_DIR": str(tmp_path)}), lambda: 0.0
    )
    with caplog.at_level(logging.WARNING, logger="poolwatch.sources"):
        for _ in range(3):
            names = [s.target.name for s in targets.current()]
    assert names == ["probe:good/dp0-tp0-pp0"]
    logged = [r.message for r in caplog.records if "event=discovery_file_skipped" in r.message]
    assert len(logged) == 8  # once per file, not once per scan
    assert len(targets.skipped) == 8


def test_a_very_long_worker_name_still_gets_a_discovery_file(tmp_path: Path) -> None:
    entry = DiscoveryEntry("http://127.0.0.1:4000", 7, "w" * 250, 0, 1, 0, "b", 1.5)
    path = write_discovery(tmp_path, entry)
    assert len(path.name) < 200
    assert path.name == discovery_name(entry.worker, 0, 1, 0)
    assert scan_discovery_dir(tmp_path)[0] == [entry]


def test_the_node_secret_is_created_once_private_and_read_back(tmp_path: Path) -> None:
    secret = ensure_secret(tmp_path)
    assert ensure_secret(tmp_path) == secret == read_secret(tmp_path)
    assert len(secret) == 64
    assert (os.stat(tmp_path / "probe-secret").st_mode & 0o777) == 0o600
    (tmp_path / "probe-secret").write_text("not hex")
    assert read_secret(tmp_path) is None
