"""What attaching says and leaves behind, in a real engine process: one log line at attach, and no
discovery file once the process is gone, however it ended (SIGTERM's default action, SIGKILL as
SGLang stops its schedulers, a graceful stop); a rank restarted under the same name keeps its file."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.helpers import REPO

from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.lifecycle import attach, detach
from rigs.fakes.toy.engine import TOY
from rigs.fakes.toy.scheduler import ToyScheduler

# an engine process: attaches the toy probe, says where its file is, then runs until killed
ENGINE = """
import sys, time
from pathlib import Path
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.lifecycle import attach
from rigs.fakes.toy.engine import TOY
from rigs.fakes.toy.scheduler import ToyScheduler
sched = ToyScheduler()
probe = attach(TOY, sched, ProbeConfig(sample_interval_s=0.0, directory=sys.argv[1], worker="pod-a"))
print(probe.publisher.path, probe.boot_id, probe.publisher.keeper.pid, flush=True)
while True:
    sched.step(); sched.idle(); time.sleep(0.05)
"""


def engine(directory: Path) -> tuple[subprocess.Popen[str], Path, str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", ENGINE, str(directory)], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    assert proc.stdout is not None
    path, boot, _ = proc.stdout.readline().split()
    return proc, Path(path), boot


def end(*procs: subprocess.Popen[str] | None) -> None:
    for proc in procs:
        if proc is None:
            continue
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def gone_within(path: Path, seconds: float = 20.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not path.exists():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_the_discovery_file_is_removed_once_the_engine_process_is_killed(tmp_path: Path, sig: int) -> None:
    proc, path, _ = engine(tmp_path / "probes")
    try:
        assert path.is_file()
        proc.send_signal(sig)
        assert proc.wait(timeout=20) == -sig  # the engine died as it would have without poolwatch
        assert gone_within(path), f"{path.name} outlived its engine process"
    finally:
        end(proc)


def test_a_rank_restarted_under_the_same_name_keeps_its_file(tmp_path: Path) -> None:
    old, path, old_boot = engine(tmp_path / "probes")
    new = None
    try:
        old.send_signal(signal.SIGSTOP)  # the old keeper waits while the new rank announces itself
        new, again, new_boot = engine(tmp_path / "probes")
        assert again == path
        assert json.loads(path.read_text())["boot_id"] == new_boot
        old.kill()
        old.wait(timeout=20)
        time.sleep(1.0)  # the old keeper has read end-of-file and looked
        assert json.loads(path.read_text())["boot_id"] == new_boot != old_boot
    finally:
        end(old, new)


def test_attaching_logs_one_line_naming_engine_rank_endpoint_and_directory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sched = ToyScheduler()
    with caplog.at_level(logging.INFO, logger="poolwatch.probe"):
        probe = attach(
            TOY, sched, ProbeConfig(sample_interval_s=0.0, directory=str(tmp_path), worker="pod-a")
        )
    try:
        lines = [r.getMessage() for r in caplog.records if r.name == "poolwatch.probe"]
        assert len(lines) == 1, lines
        assert probe.publisher is not None
        assert probe.publisher.server is not None
        assert lines[0].startswith(
            "poolwatch probe attached: toy 1.0 read as v1, pod-a dp0-tp0-pp0 serving http://127.0.0.1:"
        )
        assert lines[0].endswith(f"announced in {tmp_path} (guard off)")
        keeper = probe.publisher.keeper
        assert keeper is not None
        assert keeper.pid is not None
    finally:
        detach(sched)
    assert not list(tmp_path.glob("pod-a-*.json"))  # a graceful stop removes it itself


def test_a_rank_that_cannot_announce_itself_says_so_and_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    unsafe = tmp_path / "open"
    unsafe.mkdir(mode=0o777)
    unsafe.chmod(0o777)  # anyone could write it: never adopted
    sched = ToyScheduler()
    with caplog.at_level(logging.INFO, logger="poolwatch.probe"):
        attach(TOY, sched, ProbeConfig(sample_interval_s=0.0, directory=str(unsafe), worker="pod-a"))
    try:
        attached = [r for r in caplog.records if r.getMessage().startswith("poolwatch probe attached")]
        assert len(attached) == 1
        assert attached[0].levelno == logging.WARNING
        text = attached[0].getMessage()
        assert f"NOT announced in {unsafe}" in text
        assert "writable by group or others" in text
        assert "poolwatch doctor" in text
    finally:
        detach(sched)
