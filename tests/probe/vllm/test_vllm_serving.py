"""A vLLM probe serves the same endpoint and discovery file as an SGLang rank, so the same sidecar
reads it: the snapshot parses with the shared codec and says ``engine = vllm``."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from poolwatch.codec.snapshot import parse_snapshot
from poolwatch.conservation import gap
from poolwatch.discovery.directory import read_discovery_dir
from poolwatch.model.findings import TripwireKind
from poolwatch.model.rank import Pool
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.last_word import Outcome
from poolwatch.probe.lifecycle import attach, detach
from poolwatch.probe.vllm.engine import VLLM, vllm_release
from rigs.fakes.vllm import Scheduler


def get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, None


def test_a_served_vllm_probe_is_read_like_any_rank(tmp_path: Path) -> None:
    sched = Scheduler(32)
    config = ProbeConfig(sample_interval_s=0.01, directory=str(tmp_path), worker="vllm-a")
    probe = attach(VLLM, sched, config, release=vllm_release("0.33.0"))
    try:
        (entry,) = read_discovery_dir(tmp_path)
        assert (entry.worker, entry.boot_id) == ("vllm-a", probe.boot_id)
        blocks = sched.add("a", 2)
        probe.sample_now("test", census=True)
        sched.finish("a")
        sched.pool.free_blocks(blocks)  # a double free, named at the free
        status, doc = get(entry.url + "/v1/snapshot")
        assert status == 200
        snap = parse_snapshot(doc)
        assert snap.worker.engine == "vllm"
        assert snap.worker.key == "vllm-a/dp0-tp0-pp0"
        assert gap(snap.pools[Pool.FULL]) == 0
        assert {t.kind for t in snap.tripwires} == {TripwireKind.NEGATIVE_REF}
        status, census = get(entry.url + "/v1/census")
        assert status == 200
        assert census["schema"] == "poolwatch.census"
        assert census["pools"][0]["engine"] == "vllm"
    finally:
        detach(sched)
    assert read_discovery_dir(tmp_path) == []


def test_the_keepalive_thread_stops_with_the_publisher(tmp_path: Path) -> None:
    sched = Scheduler(8)
    probe = attach(
        VLLM, sched, ProbeConfig(directory=str(tmp_path), worker="w"), release=vllm_release("0.33.0")
    )
    thread = probe.publisher._thread
    assert thread is not None
    assert thread.is_alive()
    detach(sched)
    assert not thread.is_alive()


class Collector:
    """A sidecar that polls the probe's endpoint over HTTP every few milliseconds (each answer is a
    hand-over the last word waits for); keeps what it got."""

    def __init__(self, url: str) -> None:
        self.url, self.got = url, []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(0.005):
            status, doc = get(self.url + "/v1/snapshot")
            if status == 200:
                self.got.append(parse_snapshot(doc))

    def __enter__(self) -> Collector:
        self.thread.start()
        deadline = time.monotonic() + 30  # attended: it was handed a snapshot before the fault
        while not self.got:
            assert time.monotonic() < deadline, "no snapshot collected within 30 s"
            time.sleep(0.005)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)


def test_a_block_freed_below_zero_waits_until_the_sidecar_has_the_proof(tmp_path: Path) -> None:
    """vLLM asserts at the next allocation of a block freed at ``ref_cnt`` 0 (one step later under
    load): the free waits, bounded, until a collector was handed the snapshot naming it -- once per
    finding, never for a finding vLLM survives (a shared prefix freed twice)."""
    sched = Scheduler(32)
    config = ProbeConfig(sample_interval_s=0.01, directory=str(tmp_path), last_word_wait_s=5.0)
    probe = attach(VLLM, sched, config, release=vllm_release("0.33.0"))
    try:
        (entry,) = read_discovery_dir(tmp_path)
        shared = sched.add("a", 2)
        sched.add("b", 1, prefix=shared)
        blocks = sched.add("c", 2)
        probe.sample_now("test", census=True)
        with Collector(entry.url) as collector:
            stale = list(sched.managers[0].req_to_blocks["a"])
            sched.finish("a")
            sched.pool.free_blocks(stale)  # b still lists them: vLLM never asserts, nothing to wait for
            assert probe.last_word is None
            sched.finish("c")
            sched.pool.free_blocks(blocks)  # below zero: vLLM dies at their next allocation
            assert probe.last_word is Outcome.COLLECTED
            handed = [s for s in collector.got if TripwireKind.NEGATIVE_REF in {t.kind for t in s.tripwires}]
            assert handed  # the sidecar had the proof before the free returned
            assert {b.block_id for b in blocks} <= set(handed[0].tripwires[-1].slots)
    finally:
        detach(sched)


def test_a_block_freed_below_zero_does_not_wait_when_no_one_collects(tmp_path: Path) -> None:
    sched = Scheduler(32)
    config = ProbeConfig(sample_interval_s=0.01, directory=str(tmp_path), last_word_wait_s=5.0)
    probe = attach(VLLM, sched, config, release=vllm_release("0.33.0"))
    try:
        blocks = sched.add("a", 2)
        probe.sample_now("test", census=True)
        sched.finish("a")
        sched.pool.free_blocks(blocks)
        assert probe.last_word is Outcome.UNATTENDED
    finally:
        detach(sched)
