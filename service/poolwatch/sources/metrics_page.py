"""An engine's ``/metrics`` page read into the gauges of each scheduler rank (SGLang) or
EngineCore (vLLM) it shows: the bounded part both engines' metrics sources share.  Pure.

Only the wanted samples are read, at most ``limits.max_page_samples`` of them, for at most
``limits.max_page_ranks`` holders: one server's page never makes the sidecar hold unbounded series.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from poolwatch.errors import PayloadError, Reason
from poolwatch.limits import Limits
from poolwatch.sources.failures import scrape_failure
from poolwatch.sources.prom_text import PromTextError, Sample, TooManySamples, parse_samples

__all__ = ["parse_page"]

K = TypeVar("K")
V = TypeVar("V")


def parse_page(
    text: str,
    wanted: Callable[[str], bool],
    group: Callable[[Iterable[Sample]], dict[K, V]],
    limits: Limits,
    holders: str,
) -> dict[K, V]:
    """The page's wanted samples grouped by ``group``; raises ``PayloadError`` (parse, or
    too_large past the samples or the ``holders`` -- "ranks", "engines" -- the limits allow)."""
    try:
        grouped = group(parse_samples(text, wanted, limits.max_page_samples))
    except TooManySamples as exc:
        raise PayloadError(Reason.TOO_LARGE, f"/metrics: {exc}") from None
    except PromTextError as exc:
        raise scrape_failure(exc, "/metrics") from None
    most = limits.max_page_ranks
    if len(grouped) > most:
        raise PayloadError(Reason.TOO_LARGE, f"/metrics: {len(grouped)} {holders}, more than {most}")
    return grouped
