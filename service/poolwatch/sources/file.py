"""Snapshots from a JSON file (a fixture, or a file written by another tool).

Like node_exporter's textfile collector, the file states what is true *now*: each snapshot is
re-stamped with the time the file was read, so a committed fixture is not shown as stale.  The
file holds one snapshot object, a list of them, or ``{"snapshots": [...]}``.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import httpx

from poolwatch.codec.schema import SnapshotFormatError
from poolwatch.codec.snapshot import parse_snapshot
from poolwatch.errors import Reason, ScrapeError
from poolwatch.limits import DEFAULT_LIMITS, Limits
from poolwatch.model.snapshot import Snapshot
from poolwatch.sources.base import BoundedSource
from poolwatch.sources.failures import scrape_failure

__all__ = ["FileSource", "parse_snapshot_document"]


def parse_snapshot_document(text: str, limits: Limits = DEFAULT_LIMITS) -> list[Snapshot]:
    """Parse a file's text into snapshots; raises ``PayloadError`` naming what is wrong."""
    try:
        doc = json.loads(text)
        items = doc.get("snapshots") if isinstance(doc, dict) and "snapshots" in doc else doc
        return [parse_snapshot(item, limits) for item in (items if isinstance(items, list) else [items])]
    except (json.JSONDecodeError, RecursionError, SnapshotFormatError) as exc:
        raise scrape_failure(exc, "snapshot document") from None


class FileSource(BoundedSource):
    """Reads a snapshot file on every scrape."""

    async def scrape(self, client: httpx.AsyncClient) -> list[Snapshot]:
        text = await asyncio.to_thread(self._read)
        now = self._clock()
        return [replace(s, taken_at=now) for s in parse_snapshot_document(text, self._limits)]

    def _read(self) -> str:
        path = Path(self._target.location)
        try:
            if path.stat().st_size > self._max_bytes:
                raise ScrapeError(Reason.TOO_LARGE, f"{path}: larger than {self._max_bytes} bytes")
            return path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError) as exc:
            raise scrape_failure(exc, str(path)) from None
