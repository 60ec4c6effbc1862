"""One SGLang /metrics page cannot make the sidecar hold unbounded series: caps on samples and
ranks are a bounded ``too_large`` reason; absurd label values are bounded too."""

from __future__ import annotations

import pytest

from poolwatch.errors import PayloadError, Reason
from poolwatch.sources.logfile.heads import Ranks
from poolwatch.sources.prom_text import MAX_SAMPLES, TooManySamples, parse_samples
from poolwatch.sources.sglang.gauges import queues
from poolwatch.sources.sglang.metrics import MAX_RANKS, parse_metrics_page


def test_a_page_with_ninety_thousand_ranks_is_refused_as_too_large() -> None:
    page = "".join(f'sglang:num_running_reqs{{tp_rank="{i}"}} 0\n' for i in range(90_000))
    with pytest.raises(PayloadError) as err:
        parse_metrics_page(page)
    assert err.value.reason is Reason.TOO_LARGE


def test_more_ranks_than_the_cap_within_the_sample_limit_is_refused_too() -> None:
    page = "".join(f'sglang:num_running_reqs{{dp_rank="{i}"}} 0\n' for i in range(MAX_RANKS + 1))
    with pytest.raises(PayloadError, match="ranks") as err:
        parse_metrics_page(page)
    assert err.value.reason is Reason.TOO_LARGE


def test_the_sample_limit_counts_only_wanted_samples() -> None:
    page = "other_metric 1\n" * (MAX_SAMPLES + 10) + "wanted 1\n"
    assert [s.name for s in parse_samples(page, lambda n: n == "wanted")] == ["wanted"]
    with pytest.raises(TooManySamples):
        list(parse_samples("wanted 1\n" * 11, lambda n: n == "wanted", limit=10))


def test_a_five_thousand_digit_rank_label_is_rank_zero_not_a_crash() -> None:
    page = f'sglang:num_running_reqs{{tp_rank="{"9" * 5000}"}} 3\n'
    assert queues(parse_metrics_page(page)[Ranks()]) == {"running": 3}


def test_a_huge_queue_value_is_clamped_and_a_long_label_is_cut() -> None:
    page = f'sglang:num_running_reqs{{tp_rank="0",model_name="{"m" * 10_000}"}} 1e300\n'
    gauges = parse_metrics_page(page)[Ranks()]
    assert queues(gauges) == {"running": 2**53}
    assert len(gauges.model) == 256
