"""The node's trust boundary, attacked by a real second local user (issue 24): every program marked
"as nobody" runs as uid ``nobody`` through ``setpriv``; the probe and the sidecar run as root, as a
probe inside SGLang often does.  One test per item of the issue, each bounded (seconds); run as
root (CI), skipped otherwise (failed with ``POOLWATCH_REQUIRE_TOOLS=1``).  docs/security.md links
each guarantee to its test here.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
import yaml
from tests.helpers import REPO
from tests.hostile.local_user import NOBODY, arena, require_nobody, run_as_nobody, spawn_as_nobody
from tests.hostile.probes import probe_in

from poolwatch.codec.snapshot import dump_snapshot
from poolwatch.discovery.directory import SkipReason
from poolwatch.discovery.entry import DiscoveryEntry, write_discovery
from poolwatch.discovery.files import SECRET_FILE, ensure_secret
from poolwatch.discovery.final import final_name, sign_final
from poolwatch.discovery.safety import UnsafePathError
from poolwatch.errors import PayloadError
from poolwatch.model.rank import SourceKind
from poolwatch.model.snapshot import Snapshot
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.lifecycle import attach, detach
from poolwatch.probe.sglang.engine import SGLANG
from poolwatch.probe.sglang.extras import SglangProbe
from poolwatch.probe.sglang.repair import repairer_for
from poolwatch.probe.sglang.shapes import NEWEST_RELEASE, shape_for_version
from poolwatch.settings.sidecar import Settings
from poolwatch.sidecar.persist import load_state
from poolwatch.sources.base import Target
from poolwatch.sources.logfile.source import LogSource
from poolwatch.sources.probe_source import ProbeSource
from poolwatch.sources.sglang.log.dialect import DIALECT
from poolwatch.sources.targets import TargetSet
from rigs.fakes.sglang import Rank

pytestmark = pytest.mark.hostile

LISTENER = (Path(__file__).parent / "listener.py").read_text()
SECRET = "ab" * 32


@pytest.fixture(autouse=True)
def nobody() -> None:
    require_nobody()


def sidecar_targets(directory: Path, **env: str) -> TargetSet:
    values = {"POOLWATCH_WORKER": "w", "POOLWATCH_PROBE_DIR": str(directory), **env}
    return TargetSet(Settings.from_env(values), time.time)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[SglangProbe]:
    """A real probe (root) serving on loopback, announced in a directory only root may write."""
    with probe_in(tmp_path / "node") as probe:
        yield probe


def listener(
    home: Path, body: Snapshot, mode: str = "record", probe_port: int = 0, clock: str = "-"
) -> AbstractContextManager[subprocess.Popen[str]]:
    """The hostile user's header-recording listener (``listener.py``), its home ``home``."""
    home.mkdir()
    os.chown(home, NOBODY, NOBODY)
    (home / "body.json").write_text(json.dumps(dump_snapshot(body)))
    return spawn_as_nobody(LISTENER, str(home), mode, str(probe_port), clock)


def port_of(home: Path) -> int:
    for _ in range(500):  # at most ~5 s
        if (home / "port").is_file() and (text := (home / "port").read_text()):
            return int(text)
        time.sleep(0.01)
    raise AssertionError("the listener never came up")


# -- item 1: the secret never goes to a party that did not prove it holds it ----------------------


async def test_1_a_listener_named_by_a_discovery_file_gets_no_secret_and_cannot_switch_the_probe_off(
    served: SglangProbe, tmp_path: Path, seed_snapshot: Snapshot
) -> None:
    """The forged entry is written as root here (item 2 keeps nobody out of the directory): this is
    what a writer of the directory could still do, and it gains nothing."""
    assert served.publisher is not None
    assert served.publisher.server is not None
    node, probe_port = Path(served.config.directory), served.publisher.server.port
    secret = ensure_secret(node)
    with arena() as base, listener(base / "ears", seed_snapshot, probe_port=probe_port):
        port = port_of(base / "ears")
        forged = DiscoveryEntry(f"http://127.0.0.1:{port}", 1, "w", 0, 1, 0, "forged", time.time())
        write_discovery(node, forged)
        sources = sidecar_targets(node, POOLWATCH_SCRAPE_INTERVAL="1").current()
        assert len(sources) == 2
        async with httpx.AsyncClient(timeout=10) as client:
            for source in sources:
                await source.scrape(client)
        heard = [json.loads(line) for line in (base / "ears" / "headers.jsonl").read_text().splitlines()]
    assert heard, "the sidecar never called the forged URL"
    assert secret not in json.dumps(heard)  # neither as Bearer nor anywhere else
    assert all(h["headers"]["Authorization"].startswith("Poolwatch-HMAC ") for h in heard)
    assert [h["replayed"] for h in heard] == [403] * len(heard)  # what it heard opens nothing
    assert not served.disabled


# -- item 2: a directory, secret or DISABLE file another user planted is never adopted -------------

PLANT = """
import json, os, sys
d = sys.argv[1]
os.mkdir(d, 0o755)
with open(os.path.join(d, "probe-secret"), "w") as f:
    f.write("ab" * 32)
os.chmod(os.path.join(d, "probe-secret"), 0o644)
open(os.path.join(d, "DISABLE"), "w").close()
entry = {"url": "http://127.0.0.1:9", "pid": 1, "worker": "w", "ranks": {"dp": 0, "tp": 0, "pp": 0},
         "boot_id": "planted", "started_at": 1.0}
with open(os.path.join(d, "w-dp0-tp0-pp0.json"), "w") as f:
    json.dump(entry, f)
with open(os.path.join(d, "w-dp0-tp0-pp0.final"), "w") as f:
    f.write("poolwatch-final-v1 " + "0" * 64 + "\\n{}")
"""


def test_2_a_directory_planted_by_another_user_is_refused_with_a_reason_a_log_line_and_a_metric(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with arena() as base:
        planted = base / "poolwatch"  # /tmp/poolwatch, made first by nobody
        run_as_nobody(PLANT, str(planted))
        assert os.stat(planted).st_uid == NOBODY
        with pytest.raises(UnsafePathError, match=f"owned by uid {NOBODY}"):
            ensure_secret(planted)
        rank = Rank()
        config = ProbeConfig(sample_interval_s=0.0, directory=str(planted), release="0.5.9", worker="w")
        probe = attach(SGLANG, rank.sched, config)
        try:
            rank.sched.recv_requests()
            assert probe.publisher is not None
            assert probe.publisher.secret is None  # the planted secret is not the kill switch's key
            assert probe.publisher.path is None  # and the rank does not announce itself there
            assert f"owned by uid {NOBODY}" in probe.guard.last_error
            assert not probe.disabled  # the planted DISABLE file does not switch it off either
        finally:
            detach(rank.sched)
        assert {os.lstat(p).st_uid for p in planted.iterdir()} == {NOBODY}  # nothing of root's there
        with caplog.at_level(logging.WARNING, logger="poolwatch.sources"):
            targets = sidecar_targets(planted)
            assert targets.current() == []
    assert targets.skipped_by_reason()[SkipReason.UNSAFE] == 1
    assert [r for r in caplog.records if "unsafe" in r.message and f"uid {NOBODY}" in r.message]


WRITE_INTO = """
import json, sys
entry = {"url": "http://127.0.0.1:9", "pid": 1, "worker": "x", "ranks": {"dp": 0, "tp": 0, "pp": 0},
         "boot_id": "b", "started_at": 1.0}
try:
    with open(sys.argv[1] + "/x-dp0-tp0-pp0.json", "w") as f:
        json.dump(entry, f)
    print("written")
except PermissionError:
    print("refused")
"""


def test_2_a_world_writable_directory_is_refused_and_a_safe_one_cannot_be_written(tmp_path: Path) -> None:
    with arena() as base:
        bare = base / "emptydir"  # root's, but mode 0777: a bare Kubernetes emptyDir
        bare.mkdir()
        bare.chmod(0o777)
        assert run_as_nobody(WRITE_INTO, str(bare)).strip() == "written"
        with pytest.raises(UnsafePathError, match="writable by group or others"):
            ensure_secret(bare)
        targets = sidecar_targets(bare)
        assert targets.current() == []
        assert targets.skipped_by_reason()[SkipReason.UNSAFE] == 1
        safe = base / "probe"
        ensure_secret(safe)  # what a probe makes: root's, 0755, its secret 0600
        assert run_as_nobody(WRITE_INTO, str(safe)).strip() == "refused"
        assert os.stat(safe / SECRET_FILE).st_mode & 0o077 == 0


# -- item 3: a forged or future-dated final never pages, and none is replayed after a restart ------


async def test_3_forged_finals_never_page_and_nothing_is_replayed_after_a_restart(
    served: SglangProbe, seed_snapshot: Snapshot
) -> None:
    node = Path(served.config.directory)
    secret = ensure_secret(node)
    assert served.latest is not None
    w = served.latest.worker
    ahead = time.time() + 86_400
    doc = dump_snapshot(replace(seed_snapshot, final=True, boot_id=served.boot_id, taken_at=ahead))
    payload = json.dumps(doc).encode()
    name = final_name(w.worker, w.dp_rank, w.tp_rank, w.pp_rank)
    forged_key = sign_final("cd" * 32, name, payload)  # nobody's guess of the key
    future = sign_final(secret, name, payload)  # the real key, dated a day ahead
    targets = sidecar_targets(node)
    targets.current()  # the rank is announced: its boot is known
    for content in (forged_key, future):
        (node / name).write_bytes(content)
        assert served.publisher is not None
        served.publisher.stop()  # the rank goes; its final stays
        targets.current()
        assert targets.skipped_by_reason()[SkipReason.FORGED] == 1
        assert all(not s.target.name.startswith("final:") for s in targets.current())
    assert sidecar_targets(node).current() == []  # a restarted sidecar never saw the boot: no replay


# -- item 4: a 304's clock header goes through the snapshot's limits -------------------------------


@pytest.mark.parametrize(
    "clock", [f"seq={10**300} taken_at=1.5", "seq=1 taken_at=1e300", f"seq={10**400} taken_at=1.5"]
)
async def test_4_a_hostile_304_clock_is_refused_with_a_bounded_reason(
    clock: str, seed_snapshot: Snapshot, caplog: pytest.LogCaptureFixture
) -> None:
    with arena() as base, listener(base / "clock", seed_snapshot, mode="clock", clock=clock):
        url = f"http://127.0.0.1:{port_of(base / 'clock')}"
        source = ProbeSource(Target("probe:h", "probe", url))
        async with httpx.AsyncClient(timeout=10) as client:
            await source.scrape(client)  # a full answer with an ETag: the sidecar now holds it
            with pytest.raises(PayloadError) as refused:
                await source.scrape(client)
    assert "Poolwatch-Clock" in str(refused.value)
    assert len(str(refused.value)) < 300
    assert not [r for r in caplog.records if r.exc_info]


# -- items 5 and 6: the state file ----------------------------------------------------------------

MKFIFO = "import os, sys; os.mkfifo(sys.argv[1])"
GOOD_ALERT = {"name": "PoolwatchDoubleFree", "subject": "w/dp0-tp0-pp0/mamba", "severity": "critical",
              "labels": {"worker": "w"}, "annotations": {"summary": "s"}, "value": 1.0,
              "active_since": 10.0, "fired_at": 11.0, "last_seen": 12.0}  # fmt: skip


def test_5_a_fifo_planted_at_the_state_file_path_does_not_hang_the_start() -> None:
    with arena() as base:
        path = base / "alerts.json"
        run_as_nobody(MKFIFO, str(path))
        done: list[object] = []
        loader = threading.Thread(target=lambda: done.append(load_state(path)), daemon=True)
        loader.start()
        loader.join(timeout=5)
    assert done, "load_state blocked on the FIFO"
    (result,) = done
    assert "not a regular file" in getattr(result, "error", "")


WRITE_STATE = "import sys; open(sys.argv[1], 'w').write(sys.argv[2])"


def test_6_an_unknown_alert_in_the_state_file_is_skipped_and_the_rest_restored(tmp_path: Path) -> None:
    doc = {"version": 1, "alerts": [{**GOOD_ALERT, "name": "PoolwatchFromTheFuture"}, GOOD_ALERT]}
    path = tmp_path / "alerts.json"  # the sidecar's own file (one planted by nobody is refused: issue 34)
    path.write_text(json.dumps(doc))
    result = load_state(path)
    assert [a.name for a in result.alerts] == ["PoolwatchDoubleFree"]
    assert result.set_aside is None


def test_6_a_state_file_planted_by_another_user_is_refused_and_left_alone() -> None:
    doc = {"version": 1, "alerts": [{**GOOD_ALERT, "annotations": {"description": "<!channel> planted"}}]}
    with arena() as base:
        path = base / "alerts.json"
        run_as_nobody(WRITE_STATE, str(path), json.dumps(doc))
        result = load_state(path)
        assert path.exists()  # left for an operator to look at, never renamed or restored
    assert (result.alerts, result.unsafe) == ([], True)
    assert "owned by uid 65534" in result.error


# -- item 7: a log naming 20,000 ranks costs at most max_log_ranks ---------------------------------

WRITE_LOG = """
import sys
with open(sys.argv[1], "w") as f:
    for tp in range(20000):
        f.write(f"[2026-03-02 14:05:10 TP{tp}] Decode batch [1290], #running-req: 12, #full token: 20480, "
                "full token usage: 0.02, #queue-req: 0\\n")
"""


async def test_7_a_log_naming_20000_ranks_keeps_at_most_max_log_ranks() -> None:
    with arena() as base:
        log = base / "sglang.log"
        run_as_nobody(WRITE_LOG, str(log))
        source = LogSource(
            Target("log", SourceKind("sglang-log"), str(log), "w"), lambda: 4e9, DIALECT, max_read=8 << 20
        )
        try:
            async with httpx.AsyncClient() as client:
                snaps = await source.scrape(client)
                snaps += await source.scrape(client)
        finally:
            source.close()
    assert 0 < len({s.worker.key for s in snaps}) <= Settings.from_env({}).limits.max_log_ranks


# -- item 8: guard's "return" only where the layout is known ---------------------------------------


def test_8_guard_does_not_return_slots_on_a_release_newer_than_the_newest_known() -> None:
    newest = ".".join(str(n) for n in NEWEST_RELEASE[:3])
    assert repairer_for(shape_for_version(newest), newest).allow_return
    assert not repairer_for(shape_for_version("0.6.0"), "0.6.0").allow_return


# -- item 9: no third-party scripts, and a bounded log volume -------------------------------------

FETCH = """
import http.client, sys
out = []
for path in ("/healthz", "/docs", "/redoc", "/openapi.json"):
    c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=5)
    c.request("GET", path)
    out.append(str(c.getresponse().status))
    c.close()
print(" ".join(out))
"""


@pytest.mark.slow  # a real `poolwatch serve` (~5 s to start)
def test_9_the_sidecar_serves_no_docs_pages_and_the_log_volume_is_bounded(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    snap = tmp_path / "control.json"
    snap.write_text((REPO / "tests" / "fixtures" / "seed-snapshot.json").read_text())
    env = {**os.environ, "POOLWATCH_WORKER": "w", "POOLWATCH_HOST": "127.0.0.1", "POOLWATCH_PORT": str(port),
           "POOLWATCH_SNAPSHOT_FILES": str(snap), "POOLWATCH_LOG_LEVEL": "warning"}  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "poolwatch.cli", "serve"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        for _ in range(300):  # up within ~30 s
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        assert run_as_nobody(FETCH, str(port)).split() == ["200", "404", "404", "404"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    component = REPO / "deploy" / "kubernetes" / "components" / "sidecar"
    for engine in ("sglang", "vllm"):  # each engine's patch brings its own log volume, bounded
        patch = yaml.safe_load((component / f"{engine}.yaml").read_text())
        volumes = {v["name"]: v for v in patch["spec"]["template"]["spec"]["volumes"]}
        assert volumes[f"{engine}-logs"]["emptyDir"]["sizeLimit"]
