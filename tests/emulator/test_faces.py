"""A worker's faces: ``/metrics`` parses as Prometheus text with SGLang's names and labels,
refreshed only when SGLang refreshes; log lines have the release's formats."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.emulator.emu_scenarios import HEAVY, MAMBA, SWA, cluster

from poolwatch.discovery.directory import scan_discovery_dir
from poolwatch_emulator import WorkerServer, attach_probes, metrics_text, server_info
from poolwatch_emulator.cluster import Cluster
from poolwatch_emulator.faces import probes_gone

_FAMILIES = {
    "0.5.4.post1": (
        {"sglang:token_usage", "sglang:num_used_tokens"},
        {"sglang:mamba_usage", "sglang:kv_used_tokens"},
    ),
    "0.5.9": ({"sglang:mamba_usage", "sglang:max_total_num_tokens"}, {"sglang:kv_used_tokens"}),
    "0.5.12": (
        {
            "sglang:kv_available_tokens",
            "sglang:kv_evictable_tokens",
            "sglang:kv_used_tokens",
            "sglang:mamba_available_tokens",
            "sglang:mamba_used_tokens",
            "sglang:full_token_usage",
        },
        set(),
    ),
}


def _families(c: Cluster, worker: int = 0) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = metrics_text(c.workers[worker]).decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        out[fam.name] = [(s.labels, s.value) for s in fam.samples]
    return out


@pytest.mark.parametrize("version", list(_FAMILIES))
def test_metrics_text_parses_and_has_the_releases_families_and_labels(version: str) -> None:
    c = cluster(version, dp=2, tp=2)
    c.run_steps(300)
    fams = _families(c)
    present, absent = _FAMILIES[version]
    assert present <= set(fams)
    assert not absent & set(fams)
    labels, _ = fams["sglang:num_used_tokens"][0]
    assert {"model_name", "engine_type", "tp_rank", "pp_rank", "dp_rank"} <= set(labels)
    assert labels["engine_type"] == ("unified" if version == "0.5.4.post1" else "prefill")
    assert {lab["tp_rank"] for lab, _ in fams["sglang:num_used_tokens"]} == {"0"}  # attn_tp_rank 0 only
    assert {lab["dp_rank"] for lab, _ in fams["sglang:num_used_tokens"]} == {"0", "1"}


def test_0_5_12_pool_gauges_add_up_to_the_pool_size() -> None:
    c = cluster("0.5.12", pd=False, shape=SWA)
    c.run_steps(200)
    fams = {name: samples[0][1] for name, samples in _families(c).items()}
    for pool, size in (("kv", SWA.full_kv_tokens), ("swa", SWA.swa_kv_tokens)):
        total = sum(fams[f"sglang:{pool}_{k}_tokens"] for k in ("available", "evictable", "used"))
        assert total == size


def test_gauges_refresh_only_at_prefill_batches_every_40_decode_steps_and_idle() -> None:
    c = cluster(
        "0.5.9", pd=False, shape=MAMBA, workload=HEAVY.__class__(rate=0.05, output_median=400, gap_s=0.0)
    )
    rank = c.schedulers[0]
    c.run_until(
        lambda: rank.forward_ct_decode > 0 and not rank.waiting_queue and rank.chunked_req is None, 4000
    )
    seen = []
    for _ in range(120):
        before = rank.metrics_sample
        c.step()
        if rank.metrics_sample is not before:
            seen.append(
                (rank.forward_ct_decode, bool(rank.last_batch and rank.last_batch.forward_mode.is_extend()))
            )
    assert seen
    assert all(decode_ct % 40 == 0 or extend for decode_ct, extend in seen)


_PREFILL = {
    "0.5.4.post1": re.compile(
        r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] Prefill batch, #new-seq: \d+, #new-token: \d+, "
        r"#cached-token: \d+, full token usage: -?\d\.\d\d, mamba usage: -?\d\.\d\d, "
        r"#running-req: \d+, #queue-req: \d+, #prealloc-req: \d+, #inflight-req: \d+, "
        r"input throughput \(token/s\): \d+\.\d\d, $"
    ),
    "0.5.9": re.compile(
        r"\] Prefill batch, .*#prealloc-req: \d+, #inflight-req: \d+, input throughput \(token/s\): "
        r"\d+\.\d\d, cuda graph: False$"
    ),
    "0.5.12": re.compile(
        r"\] Prefill batch, .*#queue-req: \d+, #pending-token: \d+, #bootstrap-req: \d+, "
        r"#inflight-req: \d+, cuda graph: False, input throughput \(token/s\): \d+\.\d\d$"
    ),
}
_DECODE = re.compile(
    r"\] Decode batch, #running-req: \d+, #full token: -?\d+, full token usage: -?\d\.\d\d, "
    r"mamba num: -?\d+, mamba usage: -?\d\.\d\d, pre-allocated usage: \d\.\d\d, #prealloc-req: \d+, "
    r"#transfer-req: \d+, #retracted-req: \d+, cuda graph: True, gen throughput \(token/s\): "
    r"\d+\.\d\d, #queue-req: \d+(, )?$"
)


@pytest.mark.parametrize("version", list(_PREFILL))
def test_log_lines_have_the_releases_formats(version: str) -> None:
    c = cluster(version)
    c.run_steps(300)
    prefill, decode = c.by_role("prefill")[0].log_lines(), c.by_role("decode")[0].log_lines()
    batches = [line for line in prefill if "Prefill batch" in line]
    assert batches
    assert all(_PREFILL[version].search(line) for line in batches)
    decodes = [line for line in decode if "Decode batch" in line]
    assert decodes
    assert all(_DECODE.search(line) for line in decodes)
    assert all(line.endswith(", ") == (version == "0.5.4.post1") for line in decodes)
    assert not any("Decode batch" in line for line in prefill)
    assert any(
        line.endswith(
            f"] KV Cache is allocated. #tokens: {MAMBA.full_kv_tokens}, K size: 0.19 GB, V size: 0.19 GB"
        )
        for line in prefill
    )
    assert any(
        f"Mamba Cache is allocated. max_mamba_cache_size: {MAMBA.mamba_slots}," in line for line in prefill
    )


def test_log_lines_carry_sglangs_rank_prefix() -> None:
    c = cluster("0.5.12", dp=2, tp=2)
    c.run_steps(50)
    prefixes = {line.split("] ", 1)[0][20:] for line in c.workers[0].log_lines()}
    assert prefixes == {" DP0 TP0", " DP1 TP0"}


def test_server_info_has_server_args_and_one_internal_state_per_dp_rank() -> None:
    c = cluster("0.5.9", dp=2)
    info = server_info(c.workers[1])
    assert info["disaggregation_mode"] == "decode"
    assert info["version"] == "0.5.9"
    assert len(info["internal_states"]) == 2
    assert info["internal_states"][0]["memory_usage"]["token_capacity"] == MAMBA.full_kv_tokens


def test_the_worker_server_answers_on_loopback_with_an_ephemeral_port() -> None:
    c = cluster("0.5.12")
    c.run_steps(20)
    server = WorkerServer(c.workers[0]).start()
    try:
        assert server.url.startswith("http://127.0.0.1:")
        metrics = httpx.get(server.url + "/metrics", timeout=5)
        assert metrics.status_code == 200
        assert "sglang:kv_used_tokens" in metrics.text
        assert httpx.get(server.url + "/get_server_info", timeout=5).json()["version"] == "0.5.12"
        assert httpx.get(server.url + "/nope", timeout=5).status_code == 404
    finally:
        server.stop()


def test_a_crashed_worker_stops_answering_like_a_dead_server() -> None:
    c = cluster("0.5.4.post1", faults=("pd-chunked-mamba-double-free",))
    assert c.run_until(lambda: any(r.faults.fired.total() for r in c.schedulers), 4000)
    c.drain(abort_queued=True)
    assert c.run_until(lambda: bool(c.crashed), 4000)
    server = WorkerServer(c.crashed[0]).start()
    try:
        with pytest.raises(httpx.TransportError):
            httpx.get(server.url + "/metrics", timeout=5)
    finally:
        server.stop()


def test_a_crashed_workers_probe_endpoints_stop_answering_and_leave_their_files(tmp_path: Path) -> None:
    """The process is gone (SGLang's parent kills the tree: no atexit), so the sidecar sees its
    probe targets refuse (down) and finds the final snapshot beside the discovery files."""
    c = cluster("0.5.4.post1", faults=("pd-chunked-mamba-double-free",))
    attach_probes(c, tmp_path / "{worker}")
    urls = {w.name: [entry.url for entry in scan_discovery_dir(tmp_path / w.name)[0]] for w in c.workers}
    try:
        assert c.run_until(lambda: any(r.faults.fired.total() for r in c.schedulers), 4000)
        c.drain(abort_queued=True)
        assert c.run_until(lambda: bool(c.crashed), 4000)
        (crashed,) = c.crashed
        assert urls[crashed.name]
        for url in urls[crashed.name]:
            with pytest.raises(httpx.TransportError):
                httpx.get(url + "/v1/snapshot", timeout=5)
        assert len(scan_discovery_dir(tmp_path / crashed.name)[0]) == len(crashed.ranks)
        assert list((tmp_path / crashed.name).glob("*.final"))
        alive = next(w for w in c.workers if not w.crashed)
        assert httpx.get(urls[alive.name][0] + "/v1/snapshot", timeout=5).status_code == 200
    finally:
        for worker in c.workers:
            probes_gone(worker)
