"""The collector stripper (:func:`~poolwatch.sources.logfile.prefixes.strip`) takes off what other
programs put in front of an engine's line, never the engine's own prefix -- not even one that begins
like a collector's (an RFC 3339 time: Rust's ``tracing``, Go's loggers), which the dialect names."""

from __future__ import annotations

import re

import pytest

from poolwatch.sources.logfile.prefixes import Stripped, strip

OWN = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z +(?:INFO|WARN|ERROR) toyd")  # a dialect's own
LINE = "2026-01-02T03:04:05.123456Z  INFO toyd: pool used=12"


@pytest.mark.parametrize(
    ("raw", "kinds"),
    [
        (LINE, ()),
        (f"2026-01-02T03:04:05.999999999Z stdout F {LINE}", ("cri",)),
        (f"Jan  2 03:04:05 host toyd[81]: 2026-01-02T03:04:05.9Z stderr F {LINE}", ("journald", "cri")),
        ('{"log":"' + LINE + '\\n","stream":"stdout","time":"2026-01-02T03:04:05Z"}', ("docker-json",)),
        (f"toyd-1  | {LINE}", ("compose",)),
    ],
)
def test_an_engine_prefix_that_begins_with_an_rfc3339_time_is_kept(raw: str, kinds: tuple[str, ...]) -> None:
    stripped = strip(raw, keep=OWN)
    assert (stripped.text, stripped.kinds) == (LINE, kinds)


def test_without_keep_the_same_time_is_a_collectors_and_is_taken_off() -> None:
    # what the shipped dialects rely on: their own prefixes never begin with such a time
    assert strip(LINE) == Stripped(" INFO toyd: pool used=12", ("timestamp",))
