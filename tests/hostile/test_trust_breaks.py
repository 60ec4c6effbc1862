"""Issue 42's breaks and partials, re-run as described against a real ``poolwatch serve``: a second
local user (``nobody``, through ``setpriv``) where the issue's attacker was one, a client of the
sidecar or of the engine where it was one.

1. a restart after a real incident (12 tripwires of a recurring double free, a 6,656-character
   description) restores every firing alert and incident (before: the whole state file refused);
3. ``poolwatch incident export --sidecar`` against a sidecar run by ``nobody`` that names incidents
   ``../../x`` and by absolute path writes nothing outside ``--out`` and says why (before: four files
   elsewhere, exit 0);
5. a pre-release is unverified: no guard on a build whose free path changed, and an override that
   is no release number keeps the probe off (before: 63/63 blocks leaked; ``'0.34.0 junk'`` taken);
6. a bundle from a real sidecar names no worker given in ``--probe-workers``, no directory of a
   relative model path, and holds no heading, link or control character a snapshot's strings made;
   ``incident list`` prints none either;

and the partials: a probe directory ``nobody`` swaps pages the sidecar's *own* webhook; a directory
of a non-root engine (``nobody``'s) is refused and paged, never silently; escape sequences in vLLM's
``/version`` (a server run by ``nobody``) reach no label; the Alertmanager's bearer token reaches no
webhook.  Break 4 (memory) is ``test_memory_flood.py``; break 2 (log truth) is the log pipeline's.
"""

from __future__ import annotations

import contextlib
import json
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
from tests.helpers import FIXTURES
from tests.hostile.local_user import NOBODY, arena, require_nobody, run_as_nobody, spawn_as_nobody
from tests.hostile.sidecar_process import samples, serve

from poolwatch.codec.snapshot import dump_snapshot, parse_snapshot
from poolwatch.model.findings import CallSite, CallSiteKind, Frame, Tripwire, TripwireKind
from poolwatch.model.rank import Pool
from poolwatch.model.snapshot import Snapshot

pytestmark = pytest.mark.hostile

SEED = parse_snapshot(json.loads((FIXTURES / "seed-snapshot.json").read_text()))


class Hook(BaseHTTPRequestHandler):
    """A webhook receiver: every POSTed body and its Authorization header."""

    got: ClassVar[list[tuple[dict[str, Any], str]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Hook.got.append((body, self.headers.get("Authorization", "")))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


@contextlib.contextmanager
def webhook() -> Iterator[str]:
    Hook.got = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    finally:
        server.shutdown()
        server.server_close()


def paged(alertname: str) -> list[dict[str, Any]]:
    """The alerts named ``alertname`` the webhook got firing."""
    alerts = [a for body, _ in Hook.got for a in body.get("alerts", [body])]
    return [
        a for a in alerts if a.get("labels", {}).get("alertname") == alertname and a.get("status") == "firing"
    ]


def until(found: Callable[[], Any], seconds: float, what: str) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = found()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {seconds:g} s")


def snapshot_file(path: Path, snap: Snapshot) -> Path:
    path.write_text(json.dumps(dump_snapshot(snap)))
    return path


def recurring_double_free() -> Snapshot:
    """The issue's real incident: 12 tripwires of a recurring double free, each 2 slots, 8 request
    ids and 8 frames (what the probe emits): a 6,656-character description."""
    frames = tuple(
        Frame(f"sglang/srt/mem_cache/memory_pool_{i}.py", 387 + i, f"HybridReqToTokenPool.free_{i}")
        for i in range(8)
    )
    wires = tuple(
        Tripwire(
            TripwireKind.FREE_DUPLICATE,
            Pool.MAMBA,
            (2 * n, 2 * n + 1),
            "process_prefill_chunk",
            10 + n,
            tuple(f"7f3e9c2a41d84b0e9a6c55d1e2f0{n:02d}{r:02d}" for r in range(8)),
            call_site=CallSite(CallSiteKind.FREE, frames, 10 + n),
        )
        for n in range(12)
    )
    return replace(SEED, tripwires=wires, taken_at=time.time())


def api(url: str, path: str) -> Any:
    return httpx.get(f"{url}{path}", timeout=10).json()


# -- 1: a restart after a real incident restores every page ------------------------------------------


@pytest.mark.slow  # two real sidecars, one after the other
def test_1_a_restart_after_a_recurring_double_free_restores_every_firing_alert_and_incident(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state" / "alerts.json"
    empty = tmp_path / "probes"
    empty.mkdir(mode=0o700)
    env = {
        "POOLWATCH_WORKER": "w",
        "POOLWATCH_STATE_FILE": str(state),
        "POOLWATCH_SNAPSHOT_FILES": str(snapshot_file(tmp_path / "snap.json", recurring_double_free())),
    }
    with serve(env, tmp_path / "first.log") as url:
        firing = until(
            lambda: [a for a in api(url, "/api/v1/alerts") if a["state"] == "firing"], 60, "the double free"
        )
        until(lambda: len(api(url, "/api/v1/incidents")) == 12, 60, "twelve incidents")
    described = [a["annotations"]["description"] for a in firing if a["name"] == "PoolwatchDoubleFree"]
    assert described
    assert len(described[0]) <= 4096
    again = {"POOLWATCH_WORKER": "w", "POOLWATCH_STATE_FILE": str(state), "POOLWATCH_PROBE_DIR": str(empty)}
    with serve(again, tmp_path / "second.log") as url:  # nothing re-detects it: only the files speak
        restored = [a for a in api(url, "/api/v1/alerts") if a["state"] == "firing"]
        incidents = api(url, "/api/v1/incidents")
    assert {json.dumps(a["labels"], sort_keys=True) for a in restored} == {
        json.dumps(a["labels"], sort_keys=True) for a in firing
    }
    assert len(incidents) == 12
    log = (tmp_path / "second.log").read_text()
    assert "state_file_corrupt" not in log
    assert "incident_file_corrupt" not in log
    assert not list(state.parent.glob("*.corrupt-*"))


# -- 3: an export from a hostile sidecar writes only inside --out ------------------------------------

# the tail of a program run as nobody that serves ``answer(path)`` on a loopback port it prints
SERVE_ANSWER = """
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        data = answer(self.path)
        self.send_response(200); self.send_header("Content-Length", str(len(data))); self.end_headers()
        self.wfile.write(data)
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""

HOSTILE_SIDECAR = (
    """
import http.server, json, sys
outside = sys.argv[1]
body = json.loads(sys.argv[2])
listing = [{"id": "../../x"}, {"id": outside + "/abs"}, {"id": "../outside/y"}, {"id": body["id"]}]
def answer(path):
    return json.dumps(listing if path == "/api/v1/incidents" else dict(body, id="../../x")).encode()
"""
    + SERVE_ANSWER
)


def an_incident_body(tmp_path: Path) -> dict[str, Any]:
    from poolwatch.sidecar.incidents.log import IncidentLog
    from poolwatch.sidecar.store import SnapshotStore

    store = SnapshotStore()
    log = IncidentLog(store, {"version": "9.9", "settings": {}})
    store.subscribe(log.observe)
    store.put(recurring_double_free())
    body = log.bundle(log.listed()[0]["id"])
    assert body is not None
    return body


def test_3_an_export_from_a_sidecar_run_by_nobody_naming_paths_writes_nothing_outside_out(
    tmp_path: Path,
) -> None:
    require_nobody()
    body = an_incident_body(tmp_path)
    with arena() as outside, spawn_as_nobody(HOSTILE_SIDECAR, str(outside), json.dumps(body)) as sidecar:
        assert sidecar.stdout is not None
        port = sidecar.stdout.readline().strip()
        work = tmp_path / "a" / "b"
        done = subprocess.run(
            [sys.executable, "-m", "poolwatch.cli", "incident", "export", "--sidecar", f"http://127.0.0.1:{port}",
             "--out", str(work / "out")],
            capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
        )  # fmt: skip
        assert list(outside.iterdir()) == []
    assert done.returncode == 2, done.stderr
    assert "is not an incident id" in done.stderr
    assert "another incident's bundle" in done.stderr  # the one real id, answered with a path
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []
    assert not (tmp_path / "x").exists()
    assert not Path("/x").exists()


# -- 5: a pre-release is not a release read ---------------------------------------------------------


def test_5_a_pre_release_whose_free_path_changed_keeps_every_block_and_junk_keeps_the_probe_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from tests.probe.vllm.free_first import GUARD, changed
    from tests.probe.vllm.free_first import serve as requests

    from poolwatch.probe.lifecycle import activate, attach, detach
    from poolwatch.probe.vllm.engine import VLLM, vllm_release
    from poolwatch.probe.vllm.extras import VllmProbe

    sched = changed()
    probe = attach(VLLM, sched, GUARD, release=vllm_release("0.34.0rc1", installed=""))
    try:
        assert isinstance(probe, VllmProbe)
        assert probe.refuser is None  # before: guard on, every healthy free refused
        requests(sched, 40)
        assert sched.pool.free_block_queue.num_free_blocks == 63  # before: 63/63 leaked
        assert probe.tripwires.all() == ()
    finally:
        detach(sched)
    fake = replace(VLLM, scheduler="rigs.fakes.vllm:Scheduler")  # the activation path, as in vLLM
    with caplog.at_level(logging.ERROR, logger="poolwatch.probe"):
        assert (
            activate(fake, {"POOLWATCH_ENGINE_VERSION": "0.34.0 junk", "POOLWATCH_PROBE_SERVE": "0"}) is False
        )
    assert "'0.34.0 junk' is not a release number" in caplog.text
    unread = vllm_release("0.34.0", installed="0.35.0")
    assert (unread.family, unread.verified) == ("v0.34", False)  # before: marked read


# -- 6: a bundle names no followed worker, and no string of it is Markdown or a terminal command ------

HOSTILE = "x\r\n# Pwned heading\n[click](https://evil.example/phish) \x1b]52;c;ZXZpbA==\x07\x1b[2J"


def test_6_a_real_sidecar_s_bundle_and_incident_list_hold_no_name_markdown_or_escape_a_snapshot_made(
    tmp_path: Path,
) -> None:
    snap = recurring_double_free()
    worker = replace(
        snap.worker, worker="acme-followed-prefill", model="alice-private-models/ckpt", release=HOSTILE
    )
    wire = replace(snap.tripwires[0], first_seen_hook=HOSTILE, requests=(HOSTILE,))
    snap = replace(snap, worker=worker, tripwires=(wire,), queues={HOSTILE: 1})
    env = {
        "POOLWATCH_WORKER": "acme-followed-prefill",
        "POOLWATCH_PROBE_WORKERS": "acme-followed-prefill,acme-followed-decode",
        "POOLWATCH_SNAPSHOT_FILES": str(snapshot_file(tmp_path / "snap.json", snap)),
    }
    with serve(env, tmp_path / "sidecar.log") as url:
        (listed,) = until(lambda: api(url, "/api/v1/incidents"), 60, "the incident")
        page = httpx.get(f"{url}/api/v1/incidents/{listed['id']}/bundle.md", timeout=10).text
        bundle = httpx.get(f"{url}/api/v1/incidents/{listed['id']}", timeout=10).text
        shown = subprocess.run(
            [sys.executable, "-m", "poolwatch.cli", "incident", "list", "--sidecar", url],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    for text in (page, bundle):
        assert "acme-followed" not in text  # before: the --probe-workers names
        assert "alice-private-models" not in text  # before: the relative model path whole
    outside = "".join(
        "".join(line.split("`")[0::2]) for line in page.splitlines() if not line.startswith("```")
    )
    assert "evil.example" not in outside
    assert "Pwned" not in outside
    assert not any(c in page for c in "\r\x1b\x07")
    assert shown.returncode == 0, shown.stderr
    assert not any(c in shown.stdout for c in "\r\x1b\x07")  # before: raw carriage returns


# -- partials: the sidecar pages by itself; nothing of an engine's text is an instruction ------------

SWAP = """
import os, sys
probe, moved = sys.argv[1], sys.argv[2]
os.rename(probe, moved)
os.mkdir(probe, 0o755)
print("swapped")
"""


def test_a_probe_directory_swapped_by_nobody_pages_the_sidecars_own_webhook(tmp_path: Path) -> None:
    require_nobody()
    from tests.hostile.probes import probe_in

    # an emptyDir's root (world-writable, not sticky), which the probe seals (sticky)
    with arena(0o777) as volume, probe_in(volume / "probe"), webhook() as hook:
        env = {
            "POOLWATCH_WORKER": "w",
            "POOLWATCH_PROBE_DIR": str(volume / "probe"),
            "POOLWATCH_WEBHOOK_URLS": hook,
        }
        with serve(env, tmp_path / "sidecar.log") as url:
            until(
                lambda: any(n == "poolwatch_target_up" for n, _ in samples(url)),
                60,
                "the first scrape",
            )
            volume.chmod(0o777)  # a layout the probe could not seal (the bit taken off)
            assert run_as_nobody(SWAP, str(volume / "probe"), str(volume / "moved")).strip() == "swapped"
            (page,) = until(lambda: paged("PoolwatchProbeDirectoryLost"), 40, "the sidecar's own page")
    assert (page["labels"]["severity"], page["labels"]["reason"]) == ("critical", "unsafe")


NON_ROOT_ENGINE = """
import json, os, sys
probe = sys.argv[1]
os.mkdir(probe, 0o755)  # as a non-root engine's probe makes it: its own user's
with open(os.path.join(probe, "w-dp0-tp0-pp0.json"), "w") as f:
    json.dump({"url": "http://127.0.0.1:9", "pid": 1, "worker": "w", "ranks": {"dp": 0, "tp": 0, "pp": 0},
               "boot_id": "b", "started_at": 1.0}, f)
print("made")
"""


def test_a_probe_directory_of_a_non_root_engine_is_refused_and_paged_never_silently(tmp_path: Path) -> None:
    require_nobody()
    with arena() as volume, webhook() as hook:
        assert run_as_nobody(NON_ROOT_ENGINE, str(volume / "probe")).strip() == "made"
        assert (volume / "probe").stat().st_uid == NOBODY
        env = {
            "POOLWATCH_WORKER": "w",
            "POOLWATCH_PROBE_DIR": str(volume / "probe"),
            "POOLWATCH_WEBHOOK_URLS": hook,
        }
        with serve(env, tmp_path / "sidecar.log"):
            (page,) = until(lambda: paged("PoolwatchProbeRefused"), 40, "the sidecar's own page")
    assert page["labels"]["reason"] == "unsafe"
    assert "run the sidecar as that same user" in page["annotations"]["description"]


VLLM_SERVER = (
    """
import http.server, json, sys
page = open(sys.argv[1]).read().replace('model_name="', 'model_name="\\x1b[31m')
def answer(path):
    if path == "/version":
        return json.dumps({"version": "0.32.0\\x1b]52;c;cG93bmVk\\x07\\x1b[2J"}).encode()
    return page.encode()
"""
    + SERVE_ANSWER
)


def figures(url: str) -> str:
    """The sidecar's ``/metrics`` once it shows a pool's figures ("" before)."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return text if "poolwatch_pool_capacity_slots{" in text else ""


def test_escape_sequences_from_a_vllm_server_run_by_nobody_reach_no_label_and_no_api(tmp_path: Path) -> None:
    require_nobody()
    page = (FIXTURES / "vllm" / "v0.32.0-cpu-real.metrics.txt").read_text()
    with arena() as shared:
        readable = shared / "page.txt"
        readable.write_text(page)
        readable.chmod(0o644)
        metrics, workers = scraped_vllm(readable, tmp_path)
    for text in (metrics, workers):
        assert not any(c in text for c in "\x1b\x07")  # before: in the release label and the API
        assert "cG93bmVk" not in text
    assert "␛[31m" in metrics  # the model's escape, shown as a sign


def scraped_vllm(readable: Path, tmp_path: Path) -> tuple[str, str]:
    """``/metrics`` and ``/api/v1/workers`` of a sidecar reading the vLLM server ``nobody`` runs."""
    with spawn_as_nobody(VLLM_SERVER, str(readable)) as server:
        assert server.stdout is not None
        port = server.stdout.readline().strip()
        env = {
            "POOLWATCH_ENGINE": "vllm",
            "POOLWATCH_WORKER": "vllm-0",
            "POOLWATCH_METRICS_URLS": f"http://127.0.0.1:{port}",
        }
        with serve(env, tmp_path / "sidecar.log") as url:
            metrics = until(lambda: figures(url), 60, "vLLM's figures")
            workers = httpx.get(f"{url}/api/v1/workers", timeout=10).text
    return metrics, workers


def test_the_alertmanagers_bearer_token_reaches_no_webhook(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("AM-ONLY-TOKEN\n")
    token.chmod(0o600)
    with webhook() as hook:
        env = {
            "POOLWATCH_WORKER": "w",
            "POOLWATCH_SNAPSHOT_FILES": str(snapshot_file(tmp_path / "snap.json", recurring_double_free())),
            "POOLWATCH_WEBHOOK_URLS": hook,
            "POOLWATCH_BEARER_TOKEN_FILE": str(token),
        }
        with serve(env, tmp_path / "sidecar.log"):
            until(lambda: paged("PoolwatchDoubleFree"), 60, "the page")
    assert {auth for _, auth in Hook.got} == {""}  # before: "Bearer AM-ONLY-TOKEN" to every webhook
