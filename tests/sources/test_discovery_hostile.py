"""A hostile discovery directory: FIFOs, devices, huge files, forged URLs and poisoned names are
skipped quickly with a reason (logged once), and the good probe beside them is still found."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from poolwatch.catalog.metrics import by_name
from poolwatch.discovery.directory import SkipReason, scan_discovery_dir, skip_reason
from poolwatch.discovery.entry import DiscoveryEntry, discovery_name, write_discovery
from poolwatch.discovery.files import ensure_secret, read_secret
from poolwatch.limits import Limits
from poolwatch.settings.sidecar import Settings
from poolwatch.sidecar.metrics.discovery import DiscoveryCollector
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


REASONS = {
    "fifo.json": SkipReason.NOT_REGULAR,
    "zero.json": SkipReason.NOT_REGULAR,
    "huge.json": SkipReason.TOO_LARGE,
    "metadata.json": SkipReason.NOT_LOOPBACK,
    "remote.json": SkipReason.NOT_LOOPBACK,
    "surrogate.json": SkipReason.SCHEMA,
    "bigint.json": SkipReason.SCHEMA,
    "deep.json": SkipReason.TOO_LARGE,  # 200 KB of brackets
}


def test_each_skipped_file_names_a_bounded_reason_first(tmp_path: Path) -> None:
    hostile(tmp_path)
    (tmp_path / "garbage.json").write_text("{not json")
    (tmp_path / "nested.json").write_text("[" * 5000 + "]" * 5000)
    (tmp_path / "latin1.json").write_bytes(b'{"url": "\xe9"}')
    _, problems = scan_discovery_dir(tmp_path)
    assert {name: skip_reason(why) for name, why in problems.items()} == {
        **REASONS,
        "garbage.json": SkipReason.NOT_JSON,
        "nested.json": SkipReason.NOT_JSON,
        "latin1.json": SkipReason.NOT_JSON,
    }


def test_a_directory_that_cannot_be_listed_and_one_with_too_many_files_have_their_own_reasons(
    tmp_path: Path,
) -> None:
    _, missing = scan_discovery_dir(tmp_path / "absent")
    assert [skip_reason(why) for why in missing.values()] == [SkipReason.DIRECTORY]
    for i in range(3):
        write_discovery(tmp_path, DiscoveryEntry("http://127.0.0.1:4000", 7, f"w{i}", 0, 0, 0, "b", 1.5))
    entries, problems = scan_discovery_dir(tmp_path, limits=Limits(max_discovery_files=2))
    assert len(entries) == 2
    assert [skip_reason(why) for why in problems.values()] == [SkipReason.TOO_MANY_FILES]


def test_the_skipped_files_are_a_self_metric_by_reason_that_follows_the_directory(tmp_path: Path) -> None:
    hostile(tmp_path)
    targets = TargetSet(
        Settings.from_env({"POOLWATCH_WORKER": "t", "POOLWATCH_PROBE_DIR": str(tmp_path)}), lambda: 0.0
    )
    registry = CollectorRegistry()
    registry.register(DiscoveryCollector(targets.skipped_by_reason))

    def skipped(reason: SkipReason) -> float | None:
        return registry.get_sample_value("poolwatch_discovery_skipped_files", {"reason": reason.value})

    targets.current()
    expected = {reason: list(REASONS.values()).count(reason) for reason in SkipReason}
    assert {reason: skipped(reason) for reason in SkipReason} == expected
    (tmp_path / "fifo.json").unlink()
    (tmp_path / "remote.json").unlink()
    targets.current()
    assert (skipped(SkipReason.NOT_REGULAR), skipped(SkipReason.NOT_LOOPBACK)) == (1, 1)


def test_the_self_metric_is_absent_while_discovery_is_off(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text("{}")
    settings = Settings.from_env(
        {"POOLWATCH_WORKER": "t", "POOLWATCH_SNAPSHOT_FILES": str(tmp_path / "a.json")}
    )
    registry = CollectorRegistry()
    registry.register(DiscoveryCollector(TargetSet(settings, lambda: 0.0).skipped_by_reason))
    assert registry.get_sample_value("poolwatch_discovery_skipped_files", {"reason": "schema"}) is None


def test_the_catalogue_names_every_skip_reason() -> None:
    text = by_name("poolwatch_discovery_skipped_files").help
    assert [reason for reason in SkipReason if reason.value not in text] == []
