"""One rank's discovery file: its name, its content, its validation, and writing and removing it.

A rank announces itself as ``<dir>/<worker>-dp<D>-tp<T>-pp<P>.json`` (:func:`discovery_name`),
written atomically (a temporary file then ``os.replace``) and removed at exit; the document is
:meth:`DiscoveryEntry.to_json`.  :func:`parse_discovery` is the pure check the sidecar applies to
each decoded file: a URL off this host's loopback is refused (:class:`NotLoopbackError`), any
other bad field raises :class:`DiscoveryFormatError` naming it.  Stdlib only: the in-process probe
imports it.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import math
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from poolwatch.discovery.safety import make_directory

__all__ = [
    "DiscoveryEntry",
    "DiscoveryFormatError",
    "NotLoopbackError",
    "discovery_name",
    "loopback_url",
    "parse_discovery",
    "remove_discovery",
    "write_discovery",
]

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_MAX_NAME_CHARS = 160  # file names stay well under the 255-byte limit with the rank suffix


class DiscoveryFormatError(ValueError):
    """A discovery file does not have the expected fields; the message names the first bad one."""


class NotLoopbackError(DiscoveryFormatError):
    """A discovery file whose URL is not this host's loopback (a foreign or forged file)."""


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
    """A safe file name; a worker name too long for one keeps its first 96 characters and a hash."""
    safe = _UNSAFE.sub("_", worker) or "worker"
    if len(safe) > _MAX_NAME_CHARS:
        digest = hashlib.sha256(worker.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        safe = f"{safe[: _MAX_NAME_CHARS - 17]}-{digest}"
    return f"{safe}-dp{dp_rank}-tp{tp_rank}-pp{pp_rank}.json"


def write_discovery(directory: str | Path, entry: DiscoveryEntry) -> Path:
    """Write the entry's file atomically; returns its path.  Raises
    :class:`~poolwatch.discovery.safety.UnsafePathError` for a directory someone else could write."""
    folder = Path(directory)
    make_directory(folder)  # refuses a directory someone else could write (never adopted)
    target = folder / discovery_name(entry.worker, entry.dp_rank, entry.tp_rank, entry.pp_rank)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".poolwatch-", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)  # where to connect is no secret: a sidecar of another user reads it
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


def _text(doc: dict[str, Any], name: str, limit: int) -> str:
    value: str = _field(doc, name, str)
    if len(value) > limit:
        raise DiscoveryFormatError(f"{name}: longer than {limit} characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise DiscoveryFormatError(f"{name}: not encodable text (a lone surrogate?)") from None
    return value


def _small_int(doc: dict[str, Any], name: str, high: int) -> int:
    value: int = _field(doc, name, int)
    if not 0 <= value <= high:
        raise DiscoveryFormatError(f"{name}: expected 0..{high}, got {value!r:.40}")
    return value


def loopback_url(url: str) -> bool:
    """Whether ``url`` names this host's loopback (127.0.0.0/8, ::1 or ``localhost``)."""
    try:
        host = urlsplit(url).hostname or ""
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_discovery(doc: object, *, allow_remote: bool = False) -> DiscoveryEntry:
    """Validate one decoded discovery document (pure).  Its URL must be a loopback one unless
    ``allow_remote`` (a probe serves 127.0.0.1 only; anything else is a foreign or forged file)."""
    if not isinstance(doc, dict):
        raise DiscoveryFormatError(f"expected an object, got {type(doc).__name__}")
    url = _text(doc, "url", 512)
    if not url.startswith(("http://", "https://")):
        raise DiscoveryFormatError(f"url: expected http(s)://..., got {url!r:.80}")
    if not allow_remote and not loopback_url(url):
        raise NotLoopbackError(f"url: not a loopback address: {url!r:.80}")
    ranks = doc.get("ranks")
    if not isinstance(ranks, dict):
        raise DiscoveryFormatError(f"ranks: expected an object, got {ranks!r:.80}")
    started = _field(doc, "started_at", (int, float))
    if not math.isfinite(started) or abs(started) > 1e11:
        raise DiscoveryFormatError(f"started_at: expected a finite unix time, got {started!r:.40}")
    return DiscoveryEntry(
        url=url,
        pid=_small_int(doc, "pid", 2**31),
        worker=_text(doc, "worker", 256),
        dp_rank=_small_int(ranks, "dp", 65535),
        tp_rank=_small_int(ranks, "tp", 65535),
        pp_rank=_small_int(ranks, "pp", 65535),
        boot_id=_text(doc, "boot_id", 64),
        started_at=float(started),
    )
