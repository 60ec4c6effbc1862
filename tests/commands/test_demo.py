"""``poolwatch demo`` end to end: the emulated cluster, the seed fault, the sidecar's page.

The demo runs as the README runs it (a subprocess, the real sidecar on a free loopback port);
the test follows its console and, with Chromium at hand, screenshots the status page while the
Mamba surplus is on it (written to ``$POOLWATCH_SCREENSHOT_DIR`` too, which refreshes docs/img/).
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import CHROMIUM_ARGS, REPO, free_port, require_tool

pytestmark = pytest.mark.slow


class Demo:
    def __init__(self, port: int, *extra: str, duration: int = 60) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="poolwatch-demo-test-"))  # what a run keeps
        cmd = [sys.executable, "-m", "poolwatch.cli", "demo", "--port", str(port), "--healthy", "10",
               "--time-scale", "2", "--duration", str(duration), "--work-dir", str(self.work),
               *extra]  # fmt: skip
        self.url = f"http://127.0.0.1:{port}"
        # from the repository root, as scripts/demo runs it
        out, err = subprocess.PIPE, subprocess.STDOUT
        self.proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, cwd=REPO)
        self.lines: list[str] = []
        self._queue: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line)

    def wait_for(self, needle: str, deadline_s: float = 90.0) -> str:
        """The first console line containing ``needle`` (bounded wait on the demo's own pace)."""
        end = time.monotonic() + deadline_s
        for line in self.lines:
            if needle in line:
                return line
        while time.monotonic() < end:
            try:
                line = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            self.lines.append(line)
            if needle in line:
                return line
        raise AssertionError(f"the demo never printed {needle!r}; it printed:\n{''.join(self.lines)}")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=20)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        shutil.rmtree(self.work, ignore_errors=True)


@pytest.fixture(scope="module")
def demo() -> Iterator[Demo]:
    # long enough to outlive every test of the module (the status page test runs after the guard
    # demo's half minute); the fixture ends it
    running = Demo(free_port(), duration=600)
    try:
        yield running
    finally:
        running.stop()


def test_the_demo_pages_the_seed_double_free_with_the_slot_and_the_hook(demo: Demo) -> None:
    demo.wait_for("status page")
    demo.wait_for("healthy: 4 ranks, every pool balanced")
    alert = demo.wait_for("ALERT PoolwatchDoubleFree (critical) prefill-0")
    assert "mamba" in alert
    assert "gap -1" in alert
    assert "first seen after process_prefill_chunk" in alert


def test_the_emulated_idle_check_then_crashes_the_prefill_worker_with_the_seed_message(demo: Demo) -> None:
    demo.wait_for("SGLang's idle check crashed prefill-0")
    first = demo.wait_for("memory leak detected!")  # the whole message, line by line
    assert "token_to_kv_pool_allocator memory leak detected! full_available_size=" in first
    assert "self.req_to_token_pool.mamba_pool.size=" in demo.wait_for("mamba_available_size=")


def test_with_the_guard_the_seed_fault_is_repaired_and_the_worker_keeps_serving() -> None:
    guarded = Demo(free_port(), "--guard", duration=30)
    try:
        repair = guarded.wait_for("GUARD prefill-0")
        assert "refused to free mamba slot(s)" in repair  # guard v2: before MambaPool.free ran
        assert "in mamba_pool.free" in repair
        assert "PoolwatchProbeRepaired (warning)" in guarded.wait_for("ALERT PoolwatchProbeRepaired")
        assert "Ctrl-C ends the demo" in guarded.wait_for("shows it now")
        assert "crashed workers: none" in guarded.wait_for("demo over")
        assert not any("idle check crashed" in line for line in guarded.lines)
        # the end: where to look next, the runbook of what fired as a path of the clone
        guarded.wait_for("where to look next")
        guarded.wait_for("PoolwatchProbeRepaired: docs/runbooks/PoolwatchProbeRepaired.md")
        guarded.wait_for("dashboards/poolwatch-fleet.json")
        # the run's incidents outlive it, and the end says where and how to export them
        kept = guarded.work / "sidecar" / "alerts.incidents.json"
        assert f"kept in {kept}" in guarded.wait_for("  incidents    kept in")
        export = guarded.wait_for("poolwatch incident export --file").split()  # poolwatch incident export ...
        assert guarded.proc.wait(timeout=30) == 0
        listed = subprocess.run(
            [sys.executable, "-m", "poolwatch.cli", "incident", "list", "--file", str(kept)],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        assert "refuse mamba" in listed.stdout, listed.stdout
        assert "prefill-0/dp0-tp" in listed.stdout
        done = subprocess.run(
            [sys.executable, "-m", "poolwatch.cli", *export[1:]],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        assert done.stdout.count(".md") >= 1
    finally:
        guarded.stop()


def test_a_hicache_host_double_free_pages_the_host_alert_and_no_worker_crashes() -> None:
    hicache = Demo(free_port(), "--fault", "hicache-host-double-free", "--version", "0.5.9", duration=30)
    try:
        assert "HiCache host" in hicache.wait_for("pools/rank")
        alert = hicache.wait_for("ALERT PoolwatchHostPoolGap (critical) prefill-0")
        assert "The host pool of prefill-0" in alert
        assert "will not crash" in alert
        assert "crashed workers: none" in hicache.wait_for("demo over")
        assert not any("PoolwatchDoubleFree" in line for line in hicache.lines)
    finally:
        hicache.stop()


def test_a_stranded_hold_runs_in_its_scenario_and_the_demo_tells_its_ground_truth() -> None:
    """A blind class (V05 / S20): the books balance, so the demo says what the emulator knows --
    who holds how much, for how long -- and which page should come."""
    stranded = Demo(free_port(), "--fault", "pd-prefill-stranded-kv", "--tp", "1", duration=30)
    try:
        assert "SGLang 0.5.9 PD cluster" in stranded.wait_for("poolwatch demo")
        assert "the books stay balanced" in stranded.wait_for("guard")
        truth = stranded.wait_for("ground truth: prefill-0")
        assert "stranded holder(s) keep" in truth
        assert truth.rstrip().endswith("it should page PoolwatchStrandedHold")
        assert "crashed workers: none" in stranded.wait_for("demo over")
        assert not any(
            "PoolwatchSlotLeak" in line or "PoolwatchDoubleFree" in line for line in stranded.lines
        )
    finally:
        stranded.stop()


def test_ctrl_c_ends_the_demo_and_says_where_to_look_next() -> None:
    """The README's way out: SIGINT (what Ctrl-C sends) ends it cleanly, exit 0, no traceback."""
    interrupted = Demo(free_port(), duration=600)
    try:
        interrupted.wait_for("healthy: 4 ranks, every pool balanced")
        interrupted.proc.send_signal(signal.SIGINT)
        interrupted.wait_for("demo over")
        interrupted.wait_for("where to look next")
        assert interrupted.proc.wait(timeout=30) == 0
        interrupted.wait_for("dashboards/poolwatch-fleet.json")
        assert not any("Traceback" in line for line in interrupted.lines)
    finally:
        interrupted.stop()


@pytest.mark.browser
def test_the_status_page_during_the_demo_shows_the_mamba_surplus(demo: Demo, tmp_path: Path) -> None:
    chromium = require_tool("chromium")
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    demo.wait_for("ALERT PoolwatchDoubleFree")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        try:
            page: Any = browser.new_page(viewport={"width": 1100, "height": 900})
            page.goto(demo.url + "/")
            page.get_by_text("surplus of 1 slot (double free)").first.wait_for(timeout=15_000)
            page.get_by_text("PoolwatchDoubleFree").first.wait_for(timeout=15_000)
            shot = tmp_path / "statuspage-demo.png"
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    assert shot.stat().st_size > 10_000
    if target := os.environ.get("POOLWATCH_SCREENSHOT_DIR"):
        shutil.copy(shot, Path(target) / shot.name)
