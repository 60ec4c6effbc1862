"""The exception tree of poolwatch, designed up front::

    PoolwatchError
    ├── ConfigError            a bad setting; the CLI prints one line and exits 2
    ├── ScrapeError            one failed scrape of one target; carries a bounded ``reason``
    │   ├── PayloadError       the target answered, but the body is not what it should be
    │   └── SchemaVersionError the body is a snapshot of a schema version we do not speak
    └── DeliveryError          an alert notification could not be delivered (retried)

Errors are caught at task boundaries (one target's scrape, one delivery attempt): a broken
target never breaks the others or ``/metrics``.  Foreign exceptions (httpx, ``OSError``, JSON,
``UnicodeDecodeError``, :class:`poolwatch.codec.schema.SnapshotFormatError`, Prometheus text) become a
``ScrapeError`` with its reason in one table, :mod:`poolwatch.sources.failures`; an exception no
entry maps is a bug of ours and gets reason ``internal``.
"""

from __future__ import annotations

import enum

__all__ = [
    "ConfigError",
    "DeliveryError",
    "PayloadError",
    "PoolwatchError",
    "Reason",
    "SchemaVersionError",
    "ScrapeError",
]


class Reason(enum.StrEnum):
    """The bounded set of scrape-failure reasons (a label value of
    ``poolwatch_target_scrape_errors_total``)."""

    TIMEOUT = "timeout"
    CONNECT = "connect"
    HTTP_STATUS = "http_status"
    TOO_LARGE = "too_large"
    DECODE = "decode"  # not JSON / not UTF-8
    SCHEMA = "schema"  # JSON of the wrong shape
    VERSION = "version"  # a schema version we do not speak
    PARSE = "parse"  # text that no parser understands
    IO = "io"  # a file could not be read
    INTERNAL = "internal"  # a bug of ours: an exception poolwatch did not expect


class PoolwatchError(Exception):
    """Base of every error poolwatch raises on purpose."""


class ConfigError(PoolwatchError):
    """A setting is invalid. The message is one line naming the setting."""


class ScrapeError(PoolwatchError):
    """One scrape of one target failed."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class PayloadError(ScrapeError):
    """The target answered with a body poolwatch cannot use."""


class SchemaVersionError(PayloadError):
    """The body is a snapshot of an unsupported schema version."""

    def __init__(self, message: str) -> None:
        super().__init__(Reason.VERSION, message)


class DeliveryError(PoolwatchError):
    """A notification could not be delivered; the notifier retries it."""
