"""Discovery files: how the sidecar finds every rank's probe with no per-rank configuration.

Each rank writes ``<dir>/<worker>-dp<D>-tp<T>-pp<P>.json`` (atomically: a temporary file then
``os.replace``) and removes it at exit::

    {"url": "http://127.0.0.1:41234", "pid": 4242, "worker": "prefill-0",
     "ranks": {"dp": 0, "tp": 1, "pp": 0}, "boot_id": "9f0c...", "started_at": 1767000000.0}

:func:`read_discovery_dir` is the reader the sidecar reuses: it never raises for a bad file (a
half-written or foreign file is skipped and reported in :func:`scan_discovery_dir`).
"""

from __future__ import annotations

import contextlib
import enum
import errno
import hashlib
import ipaddress
import json
import math
import os
import re
import secrets
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from poolwatch.limits import DEFAULT_LIMITS, Limits

__all__ = [
    "DiscoveryEntry",
    "DiscoveryFormatError",
    "SkipReason",
    "SECRET_FILE",
    "discovery_name",
    "ensure_secret",
    "final_name",
    "loopback_url",
    "parse_discovery",
    "read_bounded",
    "read_discovery_dir",
    "read_final",
    "read_final_dir",
    "read_secret",
    "remove_discovery",
    "scan_discovery_dir",
    "skip_reason",
    "write_discovery",
    "write_final",
]

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_SECRET = re.compile(r"[0-9a-f]{32,128}")
_MAX_NAME_CHARS = 160  # file names stay well under the 255-byte limit with the rank suffix
SECRET_FILE = "probe-secret"  # in the discovery directory; not *.json, so never read as an entry
MAX_FILE_BYTES = DEFAULT_LIMITS.max_discovery_file_bytes  # a discovery file is ~200 bytes
MAX_FILES = DEFAULT_LIMITS.max_discovery_files  # per scan; more are reported once as one problem


class DiscoveryFormatError(ValueError):
    """A discovery file does not have the expected fields; the message names the first bad one."""


class NotLoopbackError(DiscoveryFormatError):
    """A discovery file whose URL is not this host's loopback (a foreign or forged file)."""


class NotRegularFileError(ValueError):
    """A FIFO, device or socket where a regular file was expected (never read: it could block)."""


class FileTooLargeError(ValueError):
    """A file larger than the reader's limit."""


class SkipReason(enum.StrEnum):
    """Why a discovery file (or the directory) was skipped: the bounded label of
    ``poolwatch_discovery_skipped_files``.  A problem's message starts with it (``"reason: ..."``)."""

    NOT_REGULAR = "not_regular"  # FIFO, device, socket or symbolic link
    TOO_LARGE = "too_large"
    UNREADABLE = "unreadable"  # any other OSError (permissions, vanished)
    NOT_JSON = "not_json"  # not UTF-8, not JSON, nested too deep
    SCHEMA = "schema"  # JSON of the wrong shape or range
    NOT_LOOPBACK = "not_loopback"  # a URL off this host (unless explicitly allowed)
    TOO_MANY_FILES = "too_many_files"  # the directory holds more files than are read
    DIRECTORY = "directory"  # the directory itself cannot be listed (missing, permissions)


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


def ensure_secret(directory: str | Path) -> str:
    """The node's probe secret (created once, mode 0600, by whichever rank comes first)."""
    folder = Path(directory)
    found = read_secret(folder)
    if found is not None:
        return found
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".poolwatch-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(secrets.token_hex(32))
        with contextlib.suppress(FileExistsError):  # another rank won the race: use its secret
            os.link(tmp, folder / SECRET_FILE)
    finally:
        Path(tmp).unlink(missing_ok=True)
    found = read_secret(folder)
    if found is None:
        raise OSError(f"{folder / SECRET_FILE}: not a readable secret")
    return found


def read_secret(directory: str | Path) -> str | None:
    """The secret the mutating probe endpoints ask for (``Authorization: Bearer ...``), if any."""
    try:
        text = read_bounded(Path(directory) / SECRET_FILE, 256).decode("ascii").strip()
    except (OSError, ValueError):
        return None
    return text if _SECRET.fullmatch(text) else None


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


def read_bounded(path: Path, limit: int) -> bytes:
    """A regular file's bytes, at most ``limit``; a FIFO, device, socket or symlink is refused
    without blocking (``ValueError``), and so is a bigger file."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFileError("not a regular file")
        if info.st_size > limit:
            raise FileTooLargeError(f"larger than {limit} bytes")
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise FileTooLargeError(f"larger than {limit} bytes")
    return data


def scan_discovery_dir(
    path: str | Path, *, allow_remote: bool = False, limits: Limits = DEFAULT_LIMITS
) -> tuple[list[DiscoveryEntry], dict[str, str]]:
    """Entries sorted by worker and ranks, plus ``{file name: problem}`` for skipped files.

    Bounded: at most ``limits.max_discovery_files`` files of at most
    ``limits.max_discovery_file_bytes``, regular files only (a FIFO never blocks the reader),
    problems at most 200 characters each."""
    max_files = limits.max_discovery_files
    folder = Path(path)
    entries: list[DiscoveryEntry] = []
    problems: dict[str, str] = {}
    try:
        with os.scandir(folder) as listing:
            names = [e.name for e in listing if e.name.endswith(".json") and not e.name.startswith(".")]
    except OSError as exc:
        return [], {str(folder): f"{SkipReason.DIRECTORY}: {type(exc).__name__}: {exc}"[:200]}
    if len(names) > max_files:
        problems[str(folder)] = f"{SkipReason.TOO_MANY_FILES}: {len(names)} files; only {max_files} are read"
    for name in sorted(names)[:max_files]:
        try:
            doc = json.loads(read_bounded(folder / name, limits.max_discovery_file_bytes).decode("utf-8"))
            entries.append(parse_discovery(doc, allow_remote=allow_remote))
        except (OSError, ValueError, RecursionError) as exc:
            key = name.encode("utf-8", "backslashreplace").decode()[:120]
            problems[key] = f"{_reason(exc)}: {exc}"[:200]
    entries.sort(key=lambda e: (e.worker, e.dp_rank, e.tp_rank, e.pp_rank))
    return entries, problems


def _reason(exc: BaseException) -> SkipReason:
    """The bounded reason of one file's failure (most specific first)."""
    if isinstance(exc, NotRegularFileError) or (isinstance(exc, OSError) and exc.errno == errno.ELOOP):
        return SkipReason.NOT_REGULAR  # O_NOFOLLOW refuses a symbolic link with ELOOP
    if isinstance(exc, FileTooLargeError):
        return SkipReason.TOO_LARGE
    if isinstance(exc, OSError):
        return SkipReason.UNREADABLE
    if isinstance(exc, NotLoopbackError):
        return SkipReason.NOT_LOOPBACK
    if isinstance(exc, DiscoveryFormatError):
        return SkipReason.SCHEMA
    return SkipReason.NOT_JSON  # JSON, UTF-8, nesting or digit-count errors


def skip_reason(problem: str) -> SkipReason:
    """The reason a problem of :func:`scan_discovery_dir` starts with."""
    head = problem.partition(":")[0]
    return SkipReason(head) if head in SkipReason.__members__.values() else SkipReason.UNREADABLE


def read_discovery_dir(path: str | Path, *, allow_remote: bool = False) -> list[DiscoveryEntry]:
    """Every valid discovery entry in ``path`` (none if it does not exist)."""
    return scan_discovery_dir(path, allow_remote=allow_remote)[0]


# -- the final snapshot: a rank's last word before SGLang's idle check kills it -------------------

FINAL_SUFFIX = ".final"  # "<worker>-dp<D>-tp<T>-pp<P>.final": not *.json, so never read as an entry
MAX_FINAL_BYTES = 1 << 20


def final_name(worker: str, dp_rank: int, tp_rank: int, pp_rank: int) -> str:
    """The final-snapshot file of a rank, beside its discovery file."""
    return discovery_name(worker, dp_rank, tp_rank, pp_rank).removesuffix(".json") + FINAL_SUFFIX


def write_final(directory: str | Path, name: str, payload: bytes) -> Path:
    """Write ``payload`` (the ``poolwatch.snapshot`` JSON) as ``name`` atomically and synchronously:
    a per-rank temporary file, then ``os.replace``.  No ``fsync``: what follows is the process's
    crash, not the machine's, and the page cache outlives the process."""
    folder = Path(directory)
    target, tmp = folder / name, folder / f".{name}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        os.write(fd, payload)
    finally:
        os.close(fd)
    os.replace(tmp, target)
    return target


def read_final(path: str | Path) -> Any:
    """One final snapshot file, decoded (``OSError``/``ValueError`` when absent or unreadable)."""
    return json.loads(read_bounded(Path(path), MAX_FINAL_BYTES).decode("utf-8"))


def read_final_dir(directory: str | Path) -> list[tuple[str, Any]]:
    """``(file name, decoded JSON)`` of every final snapshot in ``directory`` (bad files skipped;
    the caller validates the document with :func:`poolwatch.codec.parse_snapshot`)."""
    folder = Path(directory)
    try:
        with os.scandir(folder) as listing:
            names = sorted(e.name for e in listing if e.name.endswith(FINAL_SUFFIX))
    except OSError:
        return []
    found = []
    for name in names[:MAX_FILES]:
        try:
            found.append((name, read_final(folder / name)))
        except (OSError, ValueError, RecursionError):
            continue
    return found
