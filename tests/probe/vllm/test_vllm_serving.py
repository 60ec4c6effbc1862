"""A vLLM probe serves the same endpoint and discovery file as an SGLang rank, so the same sidecar
reads it: the snapshot parses with the shared codec and says ``engine = vllm``."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.probe.vllm.fakes import Scheduler

from poolwatch.codec.snapshot import parse_snapshot
from poolwatch.conservation import gap
from poolwatch.discovery.directory import read_discovery_dir
from poolwatch.model import Pool, TripwireKind
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.lifecycle import attach, detach
from poolwatch.probe.vllm.engine import VLLM, vllm_release


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
