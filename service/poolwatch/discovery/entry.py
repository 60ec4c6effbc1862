"""One rank's discovery file: its name, its content, its validation, and writing and removing it.

A rank announces itself as ``<dir>/<worker>-dp<D>-tp<T>-pp<P>.json`` (:func:`discovery_name`),
written atomically (a temporary file then a rename, relative to the directory's handle:
:mod:`poolwatch.discovery.handle`) and removed at exit; the document is
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
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from poolwatch.discovery.handle import held
from poolwatch.discovery.safety import make_directory
from poolwatch.fields import FieldError, text
from poolwatch.inert import inert

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
    name = discovery_name(entry.worker, entry.dp_rank, entry.tp_rank, entry.pp_rank)
    # where to connect is no secret (0644): a sidecar of another user reads it
    held(folder).write(name, json.dumps(entry.to_json()).encode("utf-8"), 0o644)
    return folder / name


def remove_discovery(path: str | Path) -> None:
    """Remove a rank's file from the directory it was written in (its held handle)."""
    where = Path(path)
    try:
        folder = held(where.parent)
    except OSError:  # gone, or no longer one to write in
        return
    folder.remove(where.name)


def _field(doc: dict[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    value = doc.get(name)
    if isinstance(value, bool) or not isinstance(value, kind):
        raise DiscoveryFormatError(f"{name}: expected {getattr(kind, '__name__', 'a number')}, got {value!r}")
    return value


def _text(doc: dict[str, Any], name: str, limit: int) -> str:
    try:
        value = text(_field(doc, name, str), name, limit)  # bounded, encodable (poolwatch.fields)
    except FieldError as exc:
        raise DiscoveryFormatError(str(exc)) from None
    return inert(value)


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
