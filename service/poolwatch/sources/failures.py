"""The one table that turns a foreign exception into a bounded scrape-failure reason.

Sources read over HTTP (httpx), from files (``OSError``, ``UnicodeDecodeError``), and parse JSON,
snapshot documents and Prometheus text; each of those libraries raises its own exceptions.
:func:`scrape_failure` maps them, in one place, to a :class:`~poolwatch.errors.ScrapeError` with
a :class:`~poolwatch.errors.Reason` (a :class:`~poolwatch.errors.PayloadError` when the target
answered with something unusable).  The scrape loop maps anything a source let through the same
way; an exception the table does not know is a bug of ours, reason ``internal`` -- never
``parse``, which means the target's text is at fault.
"""

from __future__ import annotations

import json

import httpx

from poolwatch.addresses import scrub_urls
from poolwatch.codec.schema import SnapshotFormatError, SnapshotVersionError
from poolwatch.errors import PayloadError, Reason, SchemaVersionError, ScrapeError
from poolwatch.sources.prom_text import PromTextError

__all__ = ["FOREIGN", "scrape_failure"]

# most specific first: UnicodeDecodeError and JSONDecodeError are ValueErrors, a version error is
# a format error, httpx's timeouts are transport errors
FOREIGN: tuple[tuple[type[BaseException], Reason, type[ScrapeError]], ...] = (
    (httpx.TimeoutException, Reason.TIMEOUT, ScrapeError),
    (TimeoutError, Reason.TIMEOUT, ScrapeError),
    (httpx.HTTPError, Reason.CONNECT, ScrapeError),
    (UnicodeDecodeError, Reason.DECODE, PayloadError),
    (json.JSONDecodeError, Reason.DECODE, PayloadError),
    (RecursionError, Reason.DECODE, PayloadError),  # absurdly nested JSON
    (SnapshotVersionError, Reason.VERSION, SchemaVersionError),
    (SnapshotFormatError, Reason.SCHEMA, PayloadError),
    (PromTextError, Reason.PARSE, PayloadError),
    (OSError, Reason.IO, ScrapeError),
)
_SAYS = {Reason.TIMEOUT: "timed out", Reason.DECODE: "cannot be decoded"}


def scrape_failure(exc: BaseException, where: str) -> ScrapeError:
    """``exc`` as the scrape error it stands for; ``where`` names the target (URL or path)."""
    if isinstance(exc, ScrapeError):
        return exc
    for kind, reason, error in FOREIGN:
        if isinstance(exc, kind):
            detail = _detail(exc, reason)
            if error is SchemaVersionError:
                return SchemaVersionError(f"{where}: {detail}")
            return error(reason, f"{where}: {detail}")
    return ScrapeError(Reason.INTERNAL, f"{where}: {type(exc).__name__}: {scrub_urls(str(exc))}")


def _detail(exc: BaseException, reason: Reason) -> str:
    if isinstance(exc, OSError) and not isinstance(exc, TimeoutError) and exc.strerror:
        return exc.strerror
    text = scrub_urls(str(exc))  # an HTTP library's message may quote the URL whole
    if reason is Reason.TIMEOUT:
        return _SAYS[reason]
    if reason is Reason.CONNECT:
        return f"{type(exc).__name__}: {text}"
    if reason is Reason.DECODE:
        return f"{_SAYS[reason]}: {text}"
    return text
