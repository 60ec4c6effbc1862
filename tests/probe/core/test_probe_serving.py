"""The loopback endpoint and the discovery files, over real sockets on 127.0.0.1."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from poolwatch.codec.snapshot import parse_snapshot
from poolwatch.discovery.directory import read_discovery_dir, scan_discovery_dir
from poolwatch.discovery.entry import DiscoveryEntry, DiscoveryFormatError, parse_discovery, write_discovery
from poolwatch.discovery.files import read_secret
from poolwatch.model.rank import Pool
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.kill_switch import DISABLE_FILE
from poolwatch.probe.lifecycle import attach, detach
from poolwatch.probe.sglang.engine import SGLANG
from rigs.fakes.sglang import Rank


def get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def post(url: str, secret: str | None = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    sent = dict(headers or {})
    if secret is not None:
        sent["Authorization"] = f"Bearer {secret}"
    req = urllib.request.Request(url, method="POST", data=b"", headers=sent)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def config(tmp_path: Path) -> ProbeConfig:
    return ProbeConfig(sample_interval_s=0.0, directory=str(tmp_path), release="0.5.9", worker="pod-a")


def test_a_served_probe_publishes_its_snapshot_and_announces_itself(tmp_path: Path) -> None:
    rank = Rank(mamba_first_id=1)
    rank.sched.tp_rank = 1
    probe = attach(SGLANG, rank.sched, config(tmp_path))
    try:
        (entry,) = read_discovery_dir(tmp_path)
        assert (entry.worker, entry.tp_rank, entry.boot_id) == ("pod-a", 1, probe.boot_id)
        assert (tmp_path / "pod-a-dp0-tp1-pp0.json").exists()
        assert get(entry.url + "/v1/snapshot")[0] == 503
        assert get(entry.url + "/v1/census")[0] == 404
        rank.sched.recv_requests()
        status, doc = get(entry.url + "/v1/snapshot")
        snap = parse_snapshot(doc)
        assert status == 200
        assert snap.worker.key == "pod-a/dp0-tp1-pp0"
        assert Pool.MAMBA in snap.pools
        status, census = get(entry.url + "/v1/census")
        assert status == 200
        assert census["schema"] == "poolwatch.census"
        assert census["pools"][0]["first_id"] == 1
    finally:
        detach(rank.sched)
    assert read_discovery_dir(tmp_path) == []


def test_post_disable_is_the_runtime_kill_switch_with_the_secret(tmp_path: Path) -> None:
    rank = Rank()
    probe = attach(SGLANG, rank.sched, config(tmp_path))
    try:
        url = read_discovery_dir(tmp_path)[0].url
        secret = read_secret(tmp_path)
        assert secret is not None
        assert post(url + "/v1/disable", secret) == (200, {"disabled": True})
        rank.sched.recv_requests()
        assert probe.latest is not None
        assert probe.latest.pools == {}
        assert probe.latest.probe is not None
        assert probe.latest.probe.disabled
        assert get(url + "/healthz") == (200, {"ok": True, "disabled": True})
        assert post(url + "/v1/enable", secret) == (200, {"disabled": False})
        rank.sched.recv_requests()
        assert probe.latest is not None
        assert probe.latest.pools
    finally:
        detach(rank.sched)


@pytest.mark.parametrize(
    ("secret", "headers", "status"),
    [
        (None, {}, 403),
        ("wrong", {}, 403),
        ("good", {"Origin": "http://evil.example"}, 403),
        ("good", {"Sec-Fetch-Mode": "no-cors"}, 403),
        ("good", {"Host": "evil.example:80"}, 403),
    ],
)
def test_the_kill_switch_refuses_a_caller_without_the_secret_or_from_a_browser(
    tmp_path: Path, secret: str | None, headers: dict[str, str], status: int
) -> None:
    rank = Rank()
    probe = attach(SGLANG, rank.sched, config(tmp_path))
    try:
        url = read_discovery_dir(tmp_path)[0].url
        shown = read_secret(tmp_path) if secret == "good" else secret
        assert post(url + "/v1/disable", shown, headers)[0] == status
        assert not probe.disabled
    finally:
        detach(rank.sched)


def test_a_disable_file_in_the_discovery_directory_stops_every_probe_until_it_is_removed(
    tmp_path: Path,
) -> None:
    rank = Rank()
    probe = attach(SGLANG, rank.sched, config(tmp_path), serve=False)
    (tmp_path / DISABLE_FILE).touch()
    rank.sched.recv_requests()
    assert probe.disabled
    assert probe.latest is not None
    assert probe.latest.pools == {}
    (tmp_path / DISABLE_FILE).unlink()
    probe.switch.last_look = -float("inf")  # the file is looked at once a second
    rank.sched.recv_requests()
    assert not probe.disabled
    assert probe.latest is not None
    assert probe.latest.pools
    detach(rank.sched)


def test_a_port_base_binds_base_plus_the_local_rank(tmp_path: Path) -> None:
    rank = Rank()
    rank.sched.gpu_id = 3
    import socket

    urls = []
    for _ in range(5):  # another process may take the port between our look and the probe's bind
        with socket.socket() as s:  # a port that was free a moment ago is base + the local rank
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1] - 3
        attach(SGLANG, rank.sched, ProbeConfig(directory=str(tmp_path), port_base=base, release="0.5.9"))
        try:
            urls.append((read_discovery_dir(tmp_path)[0].url, base))
        finally:
            detach(rank.sched)
        if urls[-1][0].endswith(f":{base + 3}"):
            break
    url, base = urls[-1]
    assert url.endswith(f":{base + 3}"), urls


def entry(**over: Any) -> DiscoveryEntry:
    base = {
        "url": "http://127.0.0.1:4000",
        "pid": 7,
        "worker": "w/1",
        "dp_rank": 0,
        "tp_rank": 2,
        "pp_rank": 0,
        "boot_id": "b",
        "started_at": 1.5,
    }
    return DiscoveryEntry(**{**base, **over})


def test_discovery_files_round_trip_and_get_safe_names(tmp_path: Path) -> None:
    path = write_discovery(tmp_path, entry())
    assert path.name == "w_1-dp0-tp2-pp0.json"
    assert read_discovery_dir(tmp_path) == [entry()]
    assert list(tmp_path.glob(".poolwatch-*")) == []


def test_a_bad_discovery_file_is_skipped_and_reported(tmp_path: Path) -> None:
    write_discovery(tmp_path, entry())
    (tmp_path / "junk.json").write_text("{not json")
    (tmp_path / "other.json").write_text(json.dumps({**entry().to_json(), "ranks": {"dp": "x"}}))
    entries, problems = scan_discovery_dir(tmp_path)
    assert entries == [entry()]
    assert set(problems) == {"junk.json", "other.json"}
    assert problems["other.json"].startswith("schema: dp:")  # the bounded reason, then the field
    assert problems["junk.json"].startswith("not_json: ")


def test_a_missing_discovery_directory_reads_as_empty(tmp_path: Path) -> None:
    assert read_discovery_dir(tmp_path / "absent") == []


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({**entry().to_json(), "url": "ftp://x"}, "url"),
        ({**entry().to_json(), "pid": True}, "pid"),
        ({**entry().to_json(), "started_at": float("nan")}, "started_at"),
        ([], "object"),
    ],
)
def test_parse_discovery_names_the_bad_field(doc: object, field: str) -> None:
    with pytest.raises(DiscoveryFormatError, match=field):
        parse_discovery(doc)
