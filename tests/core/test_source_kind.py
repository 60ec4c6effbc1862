"""A source kind is a string, as on the wire and in a targets file: the neutral ``probe`` and
``file``, or an engine's own face, ``<engine>-metrics`` and ``<engine>-log`` -- named after the
engine, so the ground floor lists no engine's kinds."""

from __future__ import annotations

import json

import pytest

from poolwatch.model.rank import SourceKind


@pytest.mark.parametrize(
    ("value", "channel", "engine"),
    [
        ("probe", "probe", ""),
        ("file", "file", ""),
        ("sglang-metrics", "metrics", "sglang"),
        ("vllm-log", "log", "vllm"),
        ("toy_2-log", "log", "toy_2"),
    ],
)
def test_a_kind_says_its_channel_and_its_engine(value: str, channel: str, engine: str) -> None:
    kind = SourceKind(value)
    assert (kind.channel, kind.engine) == (channel, engine)
    assert kind == value
    assert json.dumps({"source": kind}) == json.dumps({"source": value})  # the wire is unchanged
    assert hash(kind) == hash(value)  # a dict keyed by the plain string finds it


def test_the_neutral_kinds_and_an_engines_kind_built_from_its_name() -> None:
    assert (SourceKind.PROBE, SourceKind.FILE) == ("probe", "file")
    assert SourceKind.of("vllm", "metrics") == "vllm-metrics"


@pytest.mark.parametrize(
    "value", ["", "metrics", "sglang", "sglang-probe", "-log", "SGLang-log", "x-file", "a b-log"]
)
def test_anything_else_is_not_a_kind(value: str) -> None:
    with pytest.raises(ValueError, match="is not a source kind"):
        SourceKind(value)
