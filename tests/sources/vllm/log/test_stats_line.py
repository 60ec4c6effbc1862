"""vLLM's periodic statistics line, family by family (S1 0.10.2 - S6 0.34.0)."""

from __future__ import annotations

import pytest

from poolwatch.sources.vllm.log.stats import StatsFigures, parse_stats_line

THROUGHPUT = "Avg prompt throughput: 812.4 tokens/s, Avg generation throughput: 402.9 tokens/s"


@pytest.mark.parametrize(
    ("family", "message", "figures"),
    [
        (
            "S1 0.10.2-0.11.0",
            f"Engine 000: {THROUGHPUT}, Running: 14 reqs, Waiting: 0 reqs, GPU KV cache usage: 6.3%, "
            "Prefix cache hit rate: 41.7%",
            StatsFigures(0, 6.3, False, "GPU", 14, 0, None, None, 41.7, throughput=1215.3),
        ),
        (
            "S2 0.11.1-0.19.1, preemptions and the optional parts",
            f"Engine 000: {THROUGHPUT}, Running: 64 reqs, Waiting: 17 reqs, Preemptions: 6, "
            "GPU KV cache usage: 97.8%, Prefix cache hit rate: 12.5%, Corrupted: 0 reqs, "
            "External prefix cache hit rate: 30.5%, MM cache hit rate: 0.0%",
            StatsFigures(0, 97.8, False, "GPU", 64, 17, None, 6, 12.5, throughput=1215.3),
        ),
        (
            "S3 0.20.0-0.29.0, deferred; a usage below zero",
            f"Engine 001: {THROUGHPUT}, Running: 0 reqs, Waiting: 4 reqs, Deferred: 4 reqs, "
            "GPU KV cache usage: -0.0%, Prefix cache hit rate: 61.2%",
            StatsFigures(1, -0.0, True, "GPU", 0, 4, 4, None, 61.2, throughput=1215.3),
        ),
        (
            "S4 0.30.0, the device named",
            f"Engine 000: {THROUGHPUT}, Running: 12 reqs, Waiting: 0 reqs, XPU KV cache usage: 41.2%, "
            "Prefix cache hit rate: 5.0%",
            StatsFigures(0, 41.2, False, "XPU", 12, 0, None, None, 5.0, throughput=1215.3),
        ),
        (
            "S5 0.31.0, no prefix-cache part",
            f"Engine 000: {THROUGHPUT}, Running: 1 reqs, Waiting: 0 reqs, CPU KV cache usage: 0.1%",
            StatsFigures(0, 0.1, False, "CPU", 1, 0, None, None, None, throughput=1215.3),
        ),
        (
            "S6 0.32.0-0.34.0, KV fetch",
            f"Engine 002: {THROUGHPUT}, Running: 31 reqs, Waiting: 6 reqs, Deferred: 2 reqs, KV fetch: 2 "
            "waiting to start, 1 in progress, 0 completed waiting, Preemptions: 3, GPU KV cache usage: "
            "87.5%, "
            "Prefix cache hit rate: 12.0%",
            StatsFigures(2, 87.5, False, "GPU", 31, 6, 2, 3, 12.0, throughput=1215.3),
        ),
        (
            "aggregated DP logger",
            f"2 Engines Aggregated: {THROUGHPUT}, Running: 9 reqs, Waiting: 1 reqs, GPU KV cache usage: "
            f"12.0%, "
            "Prefix cache hit rate: 3.0%",
            StatsFigures(None, 12.0, False, "GPU", 9, 1, None, None, 3.0, throughput=1215.3),
        ),
        (
            "0.26+ iteration line: its usage only",
            "Engine 000: Iteration(12): 1 context requests, 100 context tokens, 2 generation requests, "
            "2 generation tokens, iteration elapsed time: 3.10 ms, GPU KV cache usage: 3.1%",
            StatsFigures(0, 3.1, False, "GPU"),
        ),
    ],
)
def test_every_family_of_the_statistics_line_is_read(
    family: str, message: str, figures: StatsFigures
) -> None:
    assert parse_stats_line(message) == figures, family


@pytest.mark.parametrize(
    "message",
    [
        "Engine 000: vllm cache_config_info with initialization after num_gpu_blocks is: 8192",
        "Engine 000: Avg prompt throughput: 1.0 tokens/s",  # no usage part: not a line we read
        "Engine 0000000: Running: 1 reqs, GPU KV cache usage: 1.0%",  # an index of 7 digits
        "Decode batch, #running-req: 3, token usage: 0.01",  # SGLang's
        "Running: 3 reqs, GPU KV cache usage: 1.0%",  # no engine prefix
        "",
    ],
)
def test_other_lines_are_not_statistics(message: str) -> None:
    assert parse_stats_line(message) is None
