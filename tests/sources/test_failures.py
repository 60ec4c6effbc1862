"""The one table from foreign exceptions to scrape-failure reasons."""

from __future__ import annotations

import json

import httpx
import pytest

from poolwatch.codec.schema import SnapshotFormatError, SnapshotVersionError
from poolwatch.errors import PayloadError, Reason, SchemaVersionError, ScrapeError
from poolwatch.sources.failures import scrape_failure
from poolwatch.sources.prom_text import PromTextError


@pytest.mark.parametrize(
    ("exc", "reason", "payload"),
    [
        (httpx.ReadTimeout("slow"), Reason.TIMEOUT, False),
        (TimeoutError(), Reason.TIMEOUT, False),
        (httpx.ConnectError("refused"), Reason.CONNECT, False),
        (httpx.RemoteProtocolError("bad framing"), Reason.CONNECT, False),
        (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"), Reason.DECODE, True),
        (json.JSONDecodeError("Expecting value", "x", 0), Reason.DECODE, True),
        (RecursionError(), Reason.DECODE, True),
        (SnapshotVersionError("schema 9"), Reason.VERSION, True),
        (SnapshotFormatError("pools: missing"), Reason.SCHEMA, True),
        (PromTextError("bad value"), Reason.PARSE, True),
        (FileNotFoundError(2, "No such file or directory"), Reason.IO, False),
        (PermissionError(13, "Permission denied"), Reason.IO, False),
        (KeyError("pools"), Reason.INTERNAL, False),
        (ZeroDivisionError(), Reason.INTERNAL, False),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v),
)
def test_each_foreign_exception_has_one_reason(exc: BaseException, reason: Reason, payload: bool) -> None:
    failure = scrape_failure(exc, "http://w:1/v1/snapshot")
    assert failure.reason is reason
    assert isinstance(failure, PayloadError) is payload
    assert str(failure).startswith("http://w:1/v1/snapshot: ")
    assert "\n" not in str(failure)


def test_a_schema_version_error_stays_its_own_type() -> None:
    assert isinstance(scrape_failure(SnapshotVersionError("schema 9"), "f.json"), SchemaVersionError)


def test_a_scrape_error_passes_through_unchanged() -> None:
    own = ScrapeError(Reason.TOO_LARGE, "GET u: body larger than 10 bytes")
    assert scrape_failure(own, "elsewhere") is own


def test_an_os_error_says_what_the_system_said() -> None:
    assert str(scrape_failure(FileNotFoundError(2, "No such file or directory", "/x"), "/x")) == (
        "/x: No such file or directory"
    )
