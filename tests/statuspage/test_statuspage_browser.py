"""The status page in headless Chromium, served by the real sidecar app over a fake store.

The seed incident (SGLang #12432: Mamba size 476, available 473, evictable 4, gap -1) must show
as a red surplus; a screenshot of it is written to ``tmp_path`` (and to
``$POOLWATCH_SCREENSHOT_DIR`` when set, which is how ``docs/img/`` is refreshed).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import CHROMIUM_ARGS, FIXTURES, require_tool
from tests.statuspage.server import serve

from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.detector import Detector
from poolwatch.model.findings import CallSite, CallSiteKind, Frame, Repair, RepairKind
from poolwatch.model.rank import Exactness, IncidentKind, Phase, Pool, PoolAccount
from poolwatch.model.snapshot import Incident, Snapshot
from poolwatch.sidecar.alerts_api import alerts_router
from poolwatch.sidecar.store import SnapshotStore
from poolwatch.sources.base import Target
from poolwatch.sources.file import FileSource
from rigs.fakes.clock import FakeClock

pytestmark = pytest.mark.browser

RED, AMBER = "rgb(207, 34, 46)", "rgb(191, 135, 0)"
TIMEOUT_MS = 10_000


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    chromium = require_tool("chromium")
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="pip install playwright (never `playwright install`)"
    )
    with sync_api.sync_playwright() as pw:
        instance = pw.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        yield instance
        instance.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1100, "height": 720}, color_scheme="light")
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    yield page
    context.close()


def open_page(page: Any, url: str) -> None:
    page.goto(f"{url}/?refresh=200")
    page.wait_for_function("Number(document.body.dataset.refreshes || 0) >= 1")


def pool_row(page: Any, key: str, pool: str) -> Any:
    return page.locator(f'article.worker[data-key="{key}"] .pool[data-pool="{pool}"]')


def gap_of(page: Any, key: str, pool: str) -> tuple[str, str]:
    """The text and colour of a pool's gap line, read in one script (the page may redraw)."""
    selector = f'article.worker[data-key="{key}"] .pool[data-pool="{pool}"] .gap'
    page.wait_for_selector(selector)
    text, color = page.evaluate(
        "s => { const e = document.querySelector(s); return [e.textContent, getComputedStyle(e).color]; }",
        selector,
    )
    return text, color


def test_the_seed_incident_shows_a_red_mamba_surplus_and_a_firing_double_free(
    page: Any, seed_snapshot: Snapshot, clock: FakeClock, tmp_path: Path
) -> None:
    """The seed, read from its fixture file by the sidecar's file source and judged by its detector."""
    store = SnapshotStore()
    detector = Detector(DetectorConfig(), clock)  # the default runbook base URL
    store.subscribe(detector.observe)
    seed_file = FileSource(
        Target("file:seed-snapshot.json", "file", str(FIXTURES / "seed-snapshot.json")), clock
    )
    with serve(store, clock, routers=[alerts_router(detector.evaluate)], sources=[seed_file]) as url:
        open_page(page, url)
        key = seed_snapshot.worker.key
        assert gap_of(page, key, "mamba") == ("gap \u22121: surplus of 1 slot (double free)", RED)
        assert pool_row(page, key, "mamba").locator(".seg.surplus").count() == 1
        assert gap_of(page, key, "full")[0] == "gap 0: balanced"
        assert "size 476 \u00b7 available 473 \u00b7 evictable 4" in pool_row(page, key, "mamba").inner_text()
        assert "1 pool in surplus" in page.locator("#summary").inner_text()
        assert page.title() == "(1) poolwatch"
        alert = page.locator("#alerts li.alert", has_text="PoolwatchDoubleFree")
        assert "firing critical" in alert.inner_text()
        assert (
            alert.locator("a").get_attribute("href", timeout=TIMEOUT_MS).endswith("/PoolwatchDoubleFree.md")
        )
        assert "file:seed-snapshot.json" in page.locator("#targets tr.up").inner_text()
        assert "has-surplus" in (page.locator(f'article[data-key="{key}"]').get_attribute("class") or "")
        shot = tmp_path / "statuspage-seed.png"
        page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 10_000
    if target := os.environ.get("POOLWATCH_SCREENSHOT_DIR"):
        shutil.copy(shot, Path(target) / shot.name)


def test_a_missing_alert_api_is_reported_quietly(
    page: Any, seed_snapshot: Snapshot, clock: FakeClock
) -> None:
    store = SnapshotStore()
    store.put(seed_snapshot)
    with serve(store, clock, without_alert_api=True) as url:
        open_page(page, url)
        assert "no alert API" in page.locator("#alerts-note").inner_text()
        assert page.locator("#connection").is_hidden()
        assert page.locator(".pool").count() == 2


def coarse_deficit(seed: Snapshot) -> Snapshot:
    """The seed's rank, idle, with a coarse full pool missing 16 slots and an unknown busy split."""
    full = PoolAccount(Pool.FULL, size=1000, available=900, evictable=84, exactness=Exactness.COARSE)
    return dataclasses.replace(seed, seq=seed.seq + 1, pools={Pool.FULL: full}, phase=Phase.IDLE)


def test_a_deficit_is_amber_and_the_page_follows_new_snapshots(
    page: Any, seed_snapshot: Snapshot, clock: FakeClock
) -> None:
    store = SnapshotStore()
    store.put(seed_snapshot)
    with serve(store, clock) as url:
        open_page(page, url)
        key = seed_snapshot.worker.key
        store.put(coarse_deficit(seed_snapshot))
        page.wait_for_function("!document.querySelector('.pool[data-pool=\"mamba\"]')")
        assert gap_of(page, key, "full") == ("gap +16: deficit of 16 slots (leak)", AMBER)
        assert pool_row(page, key, "full").locator(".seg.unknown").count() == 1
        clock.advance(60)
        page.wait_for_function("document.querySelector('article.worker.stale') !== null")
        assert "stale, 60.0 s old" in page.locator(f'article[data-key="{key}"] .age').inner_text()


def test_targets_are_listed_and_a_lost_sidecar_is_announced(
    page: Any, clock: FakeClock, tmp_path: Path
) -> None:
    store = SnapshotStore()
    sources = [
        FileSource(Target("file:seed", "file", str(FIXTURES / "seed-snapshot.json"), "seed"), clock),
        FileSource(Target("file:gone", "file", str(tmp_path / "gone.json"), "gone"), clock),
    ]
    with serve(store, clock, sources=sources) as url:
        open_page(page, url)
        page.wait_for_function("document.querySelectorAll('#targets tr').length == 2")
        assert "gone.json" in page.locator("#targets tr.down").inner_text()
        assert "file:seed" in page.locator("#targets tr.up").inner_text()
        page.route("**/api/v1/workers", lambda route: route.abort())
        page.wait_for_function("!document.getElementById('connection').hidden")
        assert "sidecar unreachable" in page.locator("#connection").inner_text()
        assert page.locator(".pool").count() == 2, "the last data stays on screen"


def test_the_bar_arithmetic_scales_a_surplus_past_the_capacity_line(page: Any, clock: FakeClock) -> None:
    with serve(SnapshotStore(), clock) as url:
        open_page(page, url)
        assert "No rank has reported yet." in page.locator("#workers").inner_text()
        seed = "{size: 476, available: 473, evictable: 4, protected: 0, held: 0, session_held: 0}"
        bar = page.evaluate(f"poolwatch.poolBar({seed}, {{balance: 'surplus', gap: -1}})")
        assert [s["kind"] for s in bar["segments"]] == [
            "available",
            "evictable",
            "protected",
            "held",
            "session_held",
        ]
        assert bar["capacity"] == pytest.approx(100 * 476 / 477)
        assert bar["surplus"]["slots"] == 1
        leaky = "{size: 100, available: 50, evictable: 10, protected: 5, held: 5, session_held: 0}"
        deficit = page.evaluate(f"poolwatch.poolBar({leaky}, {{balance: 'deficit', gap: 30}})")
        assert deficit["segments"][-1] == {"kind": "lost", "slots": 30, "left": 70, "width": 30}
        assert deficit["surplus"] is None


def test_at_3am_a_crashed_rank_says_so_and_its_alerts_name_the_rank_the_slots_and_the_time(
    browser: Any, seed_snapshot: Snapshot, clock: FakeClock
) -> None:
    """A crashed scheduler (its log's exception) beside the seed's double free, judged by the
    sidecar's own detector and read in Tokyo."""
    store = SnapshotStore()
    crash = Incident(IncidentKind.SCHEDULER_EXCEPTION, "Scheduler hit an exception", clock.now)
    context = browser.new_context(viewport={"width": 1100, "height": 720}, timezone_id="Asia/Tokyo")
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    try:
        with serve(store, clock) as url:
            store.put(dataclasses.replace(seed_snapshot, taken_at=clock.now))
            log = dataclasses.replace(seed_snapshot, source="sglang-log", pools={}, incidents=(crash,))
            store.put(dataclasses.replace(log, taken_at=clock.now))
            open_page(page, url)
            page.wait_for_selector('article.worker[data-status="crashed"]')
            card = page.locator(f'article.worker[data-key="{seed_snapshot.worker.key}"]')
            assert card.get_attribute("data-status") == "crashed"
            assert card.locator(".status").inner_text() == "crashed"
            rows = page.locator("#alerts li.alert")
            assert rows.count() == 2
            names = [rows.nth(i).locator("strong").inner_text() for i in range(2)]
            assert set(names) == {"PoolwatchSchedulerCrashed", "PoolwatchDoubleFree"}
            double_free = page.locator("#alerts li.alert", has_text="PoolwatchDoubleFree")
            assert "dp0 tp0 pp0 \u00b7 mamba" in double_free.locator(".where").inner_text()
            assert "counts 1 slot twice (gap -1)" in double_free.locator(".description").inner_text()
            assert re.fullmatch(
                r"since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d GMT\+9", double_free.locator(".since").inner_text()
            )
            assert re.fullmatch(
                r"updated \d{4}-\d\d-\d\d \d\d:\d\d:\d\d GMT\+9", page.locator("#updated").inner_text()
            )
    finally:
        context.close()


HOSTILE = "<img src=x onerror=\"document.title='pwned'\"><!channel> <https://evil.example|Runbook>"


def test_hostile_text_in_a_worker_name_an_exception_and_a_target_name_is_shown_as_text(
    page: Any, seed_snapshot: Snapshot, clock: FakeClock, tmp_path: Path
) -> None:
    """The page builds its DOM with ``textContent`` only: what a log or a client wrote is shown,
    never parsed (no element, no script); the status page is a receiver like any other."""
    store = SnapshotStore()
    worker = dataclasses.replace(seed_snapshot.worker, worker=f"prefill-0{HOSTILE}")
    crash = Incident(IncidentKind.SCHEDULER_EXCEPTION, f"Scheduler hit an exception: {HOSTILE}", clock.now)
    snap = dataclasses.replace(seed_snapshot, worker=worker, taken_at=clock.now, incidents=(crash,))
    detector = Detector(DetectorConfig(), clock)
    store.subscribe(detector.observe)
    gone = FileSource(Target(f"file:{HOSTILE}", "file", str(tmp_path / "gone.json"), "gone"), clock)
    with serve(store, clock, routers=[alerts_router(detector.alerts)], sources=[gone]) as url:
        store.put(snap)
        detector.evaluate(clock.now, latest=store.latest(), targets=store.targets())
        open_page(page, url)
        page.wait_for_function("document.querySelectorAll('#alerts li.alert').length >= 1")
        page.wait_for_function("document.querySelectorAll('#targets tr').length == 1")
        assert page.locator("img").count() == 0
        assert page.title() != "pwned"
        assert HOSTILE in page.locator("#targets").inner_text()
        assert f"prefill-0{HOSTILE}" in page.locator("main").inner_text()


def test_an_incident_shows_the_engine_lines_that_freed_the_slot_and_links_its_bundle(
    page: Any, seed_snapshot: Snapshot, clock: FakeClock
) -> None:
    """The seed's wrong free, refused by guard inside ``mamba_pool.free``: the incident names
    SGLang's own lines; a frame's text from a forged snapshot is shown as text, never parsed."""
    site = CallSite(
        CallSiteKind.FREE,
        (
            Frame("sglang/srt/mem_cache/memory_pool.py", 387, "HybridReqToTokenPool.free"),
            Frame("sglang/srt/disaggregation/prefill.py", 599, f"process_prefill_chunk{HOSTILE}"),
        ),
        seq=3,
    )
    done = Repair(RepairKind.REFUSE, Pool.MAMBA, 9, (22,), "mamba_pool.free", 13, ("long2",), call_site=site)
    store = SnapshotStore()
    with serve(store, clock) as url:
        store.put(dataclasses.replace(seed_snapshot, taken_at=clock.now, repairs=(done,)))
        open_page(page, url)
        page.wait_for_selector("#incidents li.incident[data-id]")
        row = page.locator("#incidents li.incident").first
        assert row.locator("strong").inner_text() == "guard refuse \u00b7 mamba \u00b7 9"
        assert row.locator(".call-site .lead").inner_text() == "Freed by"
        frames = row.locator(".frames li")
        assert (
            frames.nth(0).inner_text() == "sglang/srt/mem_cache/memory_pool.py:387 HybridReqToTokenPool.free"
        )
        assert HOSTILE in frames.nth(1).inner_text()
        assert page.locator("img").count() == 0
        bundle = row.locator("a", has_text="bundle").get_attribute("href")
        assert bundle is not None
        page.goto(f"{url}/{bundle}")
        assert (
            "| 1 | `sglang/srt/mem_cache/memory_pool.py` | 387 | `HybridReqToTokenPool.free` |"
            in page.content()
        )
