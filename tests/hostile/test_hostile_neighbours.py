"""Issue 34's attacks, as run: a neighbour with another uid (``nobody``, through ``setpriv``) and a
hostile receiver, against a real probe and a real ``poolwatch serve``.

1. a connection hog holds every probe connection and re-opens each the moment it closes, while
   the sidecar restarts: the restarted sidecar's first scrape succeeds (before: HTTP 503, then a
   back-off growing to 30 s);
2. the probe directory: the probe makes its volume's world-writable root sticky, so the neighbour
   cannot rename the directory away; where it still can (the bit taken off), its swap is not read
   and is exported as lost (``PoolwatchProbeDirectoryLost``), the ranks stay watched (before: every
   probe target dropped, no alert);
3. receivers that answer with an endless body or one byte every few seconds: the sidecar reads a
   bounded amount, cuts each attempt at its deadline, keeps paging the other receiver, and shows
   no receiver's credentials on ``/metrics`` (before: gigabytes, a MemoryError; a stuck receiver
   for ever; user, password and token in the ``receiver`` label).

The memory and time figures are ``benchmarks/bench_hostile_neighbour.py``'s (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import os
import re
import stat
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import httpx
import pytest
from tests.helpers import FIXTURES
from tests.hostile.local_user import NOBODY, arena, require_nobody, run_as_nobody, spawn_as_nobody
from tests.hostile.probes import probe_in
from tests.hostile.sidecar_process import samples, serve

from rigs.neighbours import HOG, RECEIVERS

pytestmark = pytest.mark.hostile

TARGET = 'target="probe:w/dp0-tp0-pp0"'
SWAP = """
import json, os, sys
probe, moved = sys.argv[1], sys.argv[2]
try:
    os.rename(probe, moved)
except PermissionError:
    print("EPERM"); sys.exit(0)
os.mkdir(probe, 0o755)
with open(os.path.join(probe, "w-dp0-tp9-pp0.json"), "w") as f:
    json.dump({"url": "http://127.0.0.1:9", "pid": 1, "worker": "w", "ranks": {"dp": 0, "tp": 9, "pp": 0},
               "boot_id": "planted", "started_at": 1.0}, f)
print("swapped")
"""


@pytest.fixture(autouse=True)
def nobody() -> None:
    require_nobody()


@pytest.fixture
def volume() -> Iterator[Path]:
    """A Kubernetes emptyDir's root as the pod sees it: root's, world-writable, not sticky."""
    with arena(0o777, "poolwatch-volume-") as base:
        yield base


def first_scrape(url: str, target: str = TARGET) -> dict[tuple[str, str], float]:
    """The sidecar's metrics once the target's first scrape is recorded (up or down)."""
    for _ in range(600):
        found = samples(url)
        if any(name == "poolwatch_target_up" and target in labels for name, labels in found):
            return found
        time.sleep(0.05)
    raise AssertionError(f"the sidecar never scraped {target}")


def of(found: dict[tuple[str, str], float], name: str, *parts: str) -> list[float]:
    return [v for (n, labels), v in found.items() if n == name and all(p in labels for p in parts)]


# -- 1: a connection hog cannot keep a restarting sidecar out ---------------------------------------


def test_1_a_restarting_sidecar_is_served_at_once_while_a_neighbour_holds_and_reopens_every_connection(
    tmp_path: Path,
) -> None:
    with probe_in(tmp_path / "node") as probe:
        assert probe.publisher is not None
        assert probe.publisher.server is not None
        port = probe.publisher.server.port
        env = {
            "POOLWATCH_WORKER": "w",
            "POOLWATCH_PROBE_DIR": str(tmp_path / "node"),
            "POOLWATCH_LOG_LEVEL": "warning",
        }
        with spawn_as_nobody(HOG, str(port), "64") as hog:
            assert hog.stdout is not None
            assert hog.stdout.readline().strip() == "holding"
            for restart in range(3):
                with serve(env, tmp_path / f"sidecar-{restart}.log") as url:
                    found = first_scrape(url)
                    assert of(found, "poolwatch_target_up", TARGET) == [1.0]  # before: 0, HTTP 503
                    assert of(found, "poolwatch_target_scrape_errors_total", TARGET) in ([], [0.0])


# -- 2: the probe directory cannot be swapped, and a swap is never read ------------------------------


def test_2_the_probe_seals_its_volume_root_so_a_neighbour_cannot_rename_its_directory_away(
    volume: Path,
) -> None:
    with probe_in(volume / "probe"):
        assert stat.S_IMODE(volume.stat().st_mode) == 0o1777  # sticky, as /tmp
        said = run_as_nobody(SWAP, str(volume / "probe"), str(volume / "mine"))
        assert said.strip() == "EPERM"  # before: "swapped"
        assert (volume / "probe").stat().st_uid == 0


def test_2_a_directory_swapped_by_a_neighbour_is_not_read_and_is_exported_as_lost(
    volume: Path, tmp_path: Path
) -> None:
    with probe_in(volume / "probe"):
        env = {
            "POOLWATCH_WORKER": "w",
            "POOLWATCH_PROBE_DIR": str(volume / "probe"),
            "POOLWATCH_LOG_LEVEL": "info",
        }
        with serve(env, tmp_path / "sidecar.log") as url:
            assert of(first_scrape(url), "poolwatch_target_up", TARGET) == [1.0]
            volume.chmod(0o777)  # a layout the probe could not seal (the bit taken off)
            assert run_as_nobody(SWAP, str(volume / "probe"), str(volume / "moved")).strip() == "swapped"
            for _ in range(100):
                found = samples(url)
                if of(found, "poolwatch_discovery_directory_lost", 'reason="unsafe"') == [1.0]:
                    break
                time.sleep(0.1)
            assert of(found, "poolwatch_discovery_directory_lost", 'reason="unsafe"') == [1.0]
            assert of(found, "poolwatch_target_up", TARGET) == [1.0]  # before: dropped, no alert
            assert of(found, "poolwatch_target_up", "tp9") == []  # the planted file is never read
        log = (tmp_path / "sidecar.log").read_text()
        assert re.search(r"event=discovery_directory dir=\S+ state=unsafe had_probes=True", log), log


# -- 3: a hostile receiver costs a bounded read and delays no other receiver ------------------------


class Recorder(BaseHTTPRequestHandler):
    bodies: ClassVar[list[dict[str, object]]] = []

    def do_POST(self) -> None:
        Recorder.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


@pytest.mark.slow  # a minute or more: every receiver's delivery deadline runs out, retried
def test_3_hostile_receivers_cost_a_bounded_read_and_delay_no_other_receiver(tmp_path: Path) -> None:
    good = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=good.serve_forever, daemon=True).start()
    try:
        with spawn_as_nobody(RECEIVERS) as hostile:
            assert hostile.stdout is not None
            endless, trickle = hostile.stdout.readline().split()
            env = {
                "POOLWATCH_WORKER": "w",
                "POOLWATCH_SNAPSHOT_FILES": str(FIXTURES / "seed-snapshot.json"),  # a double free fires
                "POOLWATCH_ALERTMANAGER_URLS": f"http://oncall:hunter2@127.0.0.1:{endless}/am",
                "POOLWATCH_WEBHOOK_URLS": (
                    f"http://127.0.0.1:{trickle}/services/T0/B0/XXXXSECRET,"
                    f"http://127.0.0.1:{good.server_address[1]}/hook"
                ),
                "POOLWATCH_NOTIFY_TIMEOUT": "2",
                "POOLWATCH_LOG_LEVEL": "warning",
            }
            with serve(env, tmp_path / "sidecar.log") as url:
                for _ in range(300):
                    found = samples(url)
                    failed = of(found, "poolwatch_notifications_total", 'outcome="failed"')
                    if Recorder.bodies and len([f for f in failed if f > 0]) == 2:
                        break
                    time.sleep(0.1)
                assert [b["status"] for b in Recorder.bodies][:1] == ["firing"]  # the other receiver paged
                assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200
                exposition = httpx.get(f"{url}/metrics", timeout=5).text
        receivers = set(re.findall(r'receiver="([^"]+)"', exposition))
        hooks = {f"webhook:127.0.0.1:{trickle}", f"webhook:127.0.0.1:{good.server_address[1]}"}
        assert receivers == {f"alertmanager:127.0.0.1:{endless}", *hooks}
        for secret in ("oncall", "hunter2", "XXXXSECRET", "/services/", "/am"):
            assert secret not in exposition
        log = (tmp_path / "sidecar.log").read_text()
        assert "no complete answer within 2 s" in log  # the trickle, cut at the deadline
        assert "MemoryError" not in log
    finally:
        good.shutdown()
        good.server_close()


def test_the_hog_and_the_receivers_run_as_another_user() -> None:
    assert run_as_nobody("import os; print(os.getuid())").strip() == str(NOBODY)
    assert os.geteuid() == 0
