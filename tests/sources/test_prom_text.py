from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Gauge, generate_latest
from tests.strategies import encodable_text

from poolwatch.sources.prom_text import PromTextError, Sample, parse_samples


def everything(_: str) -> bool:
    return True


def test_samples_with_labels_values_and_timestamps_are_read() -> None:
    text = (
        "# HELP sglang:token_usage The token usage.\n"
        "# TYPE sglang:token_usage gauge\n"
        'sglang:token_usage{engine_type="unified",tp_rank="0"} 0.25\n'
        "sglang:num_used_tokens 12 1700000000000\n"
        'odd{a="x",} +Inf\n'
    )
    assert list(parse_samples(text, everything)) == [
        Sample("sglang:token_usage", {"engine_type": "unified", "tp_rank": "0"}, 0.25),
        Sample("sglang:num_used_tokens", {}, 12.0),
        Sample("odd", {"a": "x"}, math.inf),
    ]


def test_escaped_label_values_are_unescaped() -> None:
    (sample,) = parse_samples('m{model_name="a \\"b\\" c\\\\d\\ne"} 1\n', everything)
    assert sample.labels["model_name"] == 'a "b" c\\d\ne'


def test_unwanted_lines_are_skipped_even_when_they_are_garbage() -> None:
    text = "garbage {{{ not exposition\nsglang:num_running_reqs 3\n\x00\x01 binary\n"
    assert [s.name for s in parse_samples(text, lambda n: n == "sglang:num_running_reqs")] == [
        "sglang:num_running_reqs"
    ]


@pytest.mark.parametrize(
    "line",
    ['m{a="1" 2', "m{a=1} 2", "m", "m 1 2 3", "m abc", 'm{a="1"}'],
)
def test_a_malformed_wanted_line_is_an_error_naming_it(line: str) -> None:
    with pytest.raises(PromTextError, match="line 1"):
        list(parse_samples(line + "\n", everything))


label_values = encodable_text(20)
values = st.floats(allow_nan=False, allow_infinity=True, width=64)


@given(
    st.dictionaries(st.sampled_from(["tp_rank", "dp_rank", "model_name"]), label_values, min_size=1), values
)
def test_what_prometheus_client_writes_reads_back(labels: dict[str, str], value: float) -> None:
    registry = CollectorRegistry()
    gauge = Gauge("sglang:token_usage", "The token usage.", list(labels), registry=registry)
    gauge.labels(**labels).set(value)
    (sample,) = parse_samples(generate_latest(registry).decode(), lambda n: n == "sglang:token_usage")
    assert dict(sample.labels) == labels
    assert sample.value == value


@given(st.text(max_size=500))
def test_any_text_either_parses_or_raises_the_parse_error(text: str) -> None:
    try:
        for sample in parse_samples(text, everything):
            assert isinstance(sample.value, float)
    except PromTextError:
        pass
