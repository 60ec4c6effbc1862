"""Discovery files: how the sidecar finds every rank's probe with no per-rank configuration.

Each rank writes ``<dir>/<worker>-dp<D>-tp<T>-pp<P>.json`` (atomically: a temporary file then
``os.replace``) and removes it at exit::

    {"url": "http://127.0.0.1:41234", "pid": 4242, "worker": "prefill-0",
     "ranks": {"dp": 0, "tp": 1, "pp": 0}, "boot_id": "9f0c...", "started_at": 1767000000.0}

:func:`read_discovery_dir` is the reader the sidecar reuses: it never raises for a bad file (a
half-written or foreign file is skipped and reported in :func:`scan_discovery_dir`).
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "DiscoveryEntry",
    "DiscoveryFormatError",
    "discovery_name",
    "parse_discovery",
    "read_discovery_dir",
    "remove_discovery",
    "scan_discovery_dir",
    "write_discovery",
]

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


class DiscoveryFormatError(ValueError):
    """A discovery file does not have the expected fields; the message names the first bad one."""


@dataclass(frozen=True, slots=True)
class DiscoveryEntry:
    url: str
    pid: int
    worker: str
    dp_rank: int
    tp_rank: int
    pp_rank: int
    boot_id: str
    started_at: float

    def to_json(self) -> dict[str, Any]:
        ranks = {"dp": self.dp_rank, "tp": self.tp_rank, "pp": self.pp_rank}
        return {
            "url": self.url,
            "pid": self.pid,
            "worker": self.worker,
            "ranks": ranks,
            "boot_id": self.boot_id,
            "started_at": self.started_at,
        }


def discovery_name(worker: str, dp_rank: int, tp_rank: int, pp_rank: int) -> str:
    safe = _UNSAFE.sub("_", worker) or "worker"
    return f"{safe}-dp{dp_rank}-tp{tp_rank}-pp{pp_rank}.json"


def write_discovery(directory: str | Path, entry: DiscoveryEntry) -> Path:
    """Write the entry's file atomically; returns its path."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / discovery_name(entry.worker, entry.dp_rank, entry.tp_rank, entry.pp_rank)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".poolwatch-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(entry.to_json(), out)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def remove_discovery(path: str | Path) -> None:
    Path(path).unlink(missing_ok=True)


def _field(doc: dict[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    value = doc.get(name)
    if isinstance(value, bool) or not isinstance(value, kind):
        raise DiscoveryFormatError(f"{name}: expected {getattr(kind, '__name__', 'a number')}, got {value!r}")
    return value


def parse_discovery(doc: object) -> DiscoveryEntry:
    """Validate one decoded discovery document (pure)."""
    if not isinstance(doc, dict):
        raise DiscoveryFormatError(f"expected an object, got {type(doc).__name__}")
    url = _field(doc, "url", str)
    if not url.startswith(("http://", "https://")):
        raise DiscoveryFormatError(f"url: expected http(s)://..., got {url!r}")
    ranks = doc.get("ranks")
    if not isinstance(ranks, dict):
        raise DiscoveryFormatError(f"ranks: expected an object, got {ranks!r}")
    started = _field(doc, "started_at", (int, float))
    if not math.isfinite(started):
        raise DiscoveryFormatError(f"started_at: expected a finite number, got {started!r}")
    return DiscoveryEntry(
        url=url,
        pid=_field(doc, "pid", int),
        worker=_field(doc, "worker", str),
        dp_rank=_field(ranks, "dp", int),
        tp_rank=_field(ranks, "tp", int),
        pp_rank=_field(ranks, "pp", int),
        boot_id=_field(doc, "boot_id", str),
        started_at=float(started),
    )


def scan_discovery_dir(path: str | Path) -> tuple[list[DiscoveryEntry], dict[str, str]]:
    """Entries sorted by worker and ranks, plus ``{file name: problem}`` for skipped files."""
    folder = Path(path)
    entries: list[DiscoveryEntry] = []
    problems: dict[str, str] = {}
    try:
        files = sorted(p for p in folder.iterdir() if p.suffix == ".json" and not p.name.startswith("."))
    except OSError as exc:
        return [], {str(folder): f"{type(exc).__name__}: {exc}"}
    for file in files:
        try:
            entries.append(parse_discovery(json.loads(file.read_text(encoding="utf-8"))))
        except (OSError, ValueError) as exc:
            problems[file.name] = str(exc)
    entries.sort(key=lambda e: (e.worker, e.dp_rank, e.tp_rank, e.pp_rank))
    return entries, problems


def read_discovery_dir(path: str | Path) -> list[DiscoveryEntry]:
    """Every valid discovery entry in ``path`` (none if it does not exist)."""
    return scan_discovery_dir(path)[0]
