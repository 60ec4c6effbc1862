"""A small parser for the Prometheus text exposition format.  Pure.

It reads only the samples whose names the caller wants, so a large ``/metrics`` page (SGLang's
histograms) costs one prefix check per uninteresting line.  A malformed *wanted* line raises
:class:`PromTextError` naming the line; everything else is skipped.  At most ``limit`` wanted
samples are read (:data:`MAX_SAMPLES` by default): a page with more raises :class:`TooManySamples`,
so one target cannot make the sidecar hold unbounded series.  Label values are cut to
:data:`MAX_LABEL_CHARS`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from poolwatch.limits import DEFAULT_LIMITS

__all__ = ["MAX_SAMPLES", "PromTextError", "Sample", "TooManySamples", "parse_samples"]

MAX_SAMPLES = DEFAULT_LIMITS.max_page_samples  # wanted samples per page (POOLWATCH_MAX_PAGE_SAMPLES)
MAX_LABEL_CHARS = 256

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|(?=}))')
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_ESCAPED = re.compile(r"\\[\\\"n]")


class PromTextError(ValueError):
    """A wanted sample line is not valid exposition text."""


class TooManySamples(PromTextError):
    """A page with more wanted samples than the limit (a cardinality bomb, or not SGLang)."""


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


def parse_samples(text: str, wanted: Callable[[str], bool], limit: int = MAX_SAMPLES) -> Iterator[Sample]:
    """The samples of ``text`` whose metric name satisfies ``wanted`` (at most ``limit``)."""
    count = 0
    for number, line in enumerate(text.split("\n"), 1):  # not splitlines(): "\x1e" is no newline
        if not line or line[0] == "#":
            continue
        m = _NAME.match(line)
        if m is None or not wanted(m.group()):
            continue
        count += 1
        if count > limit:
            raise TooManySamples(f"more than {limit} wanted samples (line {number})")
        try:
            yield _sample(line, m.group(), m.end())
        except PromTextError as exc:
            raise PromTextError(f"line {number}: {exc}: {line[:120]!r}") from None


def _sample(line: str, name: str, pos: int) -> Sample:
    labels: dict[str, str] = {}
    if pos < len(line) and line[pos] == "{":
        pos = _labels(line, pos + 1, labels)
    rest = line[pos:].split()
    if not rest or len(rest) > 2:
        raise PromTextError("expected a value (and an optional timestamp)")
    return Sample(name, labels, _value(rest[0]))


def _labels(line: str, pos: int, out: dict[str, str]) -> int:
    while True:
        if pos < len(line) and line[pos] == "}":
            return pos + 1
        m = _LABEL.match(line, pos)
        if m is None:
            raise PromTextError("bad label set")
        out[m[1]] = _ESCAPED.sub(lambda e: _ESCAPES[e.group()], m[2])[:MAX_LABEL_CHARS]
        pos = m.end()


def _value(raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise PromTextError(f"bad value {raw!r}") from None
