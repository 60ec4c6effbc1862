"""Discovery files: how the sidecar finds every rank's probe with no per-rank configuration.

Each rank writes ``<dir>/<worker>-dp<D>-tp<T>-pp<P>.json`` (atomically: a temporary file then
``os.replace``) and removes it at exit::

    {"url": "http://127.0.0.1:41234", "pid": 4242, "worker": "prefill-0",
     "ranks": {"dp": 0, "tp": 1, "pp": 0}, "boot_id": "9f0c...", "started_at": 1767000000.0}

:func:`read_discovery_dir` is the reader the sidecar reuses: it never raises for a bad file (a
half-written or foreign file is skipped and reported in :func:`scan_discovery_dir`).

This module is the contract's public face: it scans the directory; the rest lives in
:mod:`poolwatch.discovery.entry` (one rank's file: name, content, validation, writing),
:mod:`poolwatch.discovery.files` (bounded reads, the node's probe secret),
:mod:`poolwatch.discovery.final` (signed final snapshots), :mod:`poolwatch.discovery.safety` (who
may have written the directory: owner and mode checks, the default directory) and
:mod:`poolwatch.discovery.auth` (request signatures: the secret proven, never sent).  All of them
import only the standard library and :mod:`poolwatch.limits`: the in-process probe imports them.
"""

from __future__ import annotations

import enum
import errno
import json
from pathlib import Path

from poolwatch.discovery.entry import (
    DiscoveryEntry,
    DiscoveryFormatError,
    NotLoopbackError,
    parse_discovery,
)
from poolwatch.discovery.files import FileTooLargeError, NotRegularFileError, read_in
from poolwatch.discovery.handle import held
from poolwatch.discovery.safety import UnsafePathError
from poolwatch.limits import DEFAULT_LIMITS, Limits

__all__ = ["SkipReason", "read_discovery_dir", "scan_discovery_dir", "skip_reason"]


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
    UNSAFE = "unsafe"  # the directory or a file is another user's or writable by others: never read
    FORGED = "forged"  # a final snapshot whose signature, boot or age does not hold (never delivered)


def scan_discovery_dir(
    path: str | Path, *, allow_remote: bool = False, limits: Limits = DEFAULT_LIMITS
) -> tuple[list[DiscoveryEntry], dict[str, str]]:
    """Entries sorted by worker and ranks, plus ``{file name: problem}`` for skipped files.

    Bounded: at most ``limits.max_discovery_files`` files of at most
    ``limits.max_discovery_file_bytes``, regular files only (a FIFO never blocks the reader),
    problems at most 200 characters each.  A directory another user owns, or others may write, is
    refused whole (:mod:`poolwatch.discovery.safety`): one ``unsafe`` problem, no entry."""
    max_files = limits.max_discovery_files
    folder = Path(path)
    entries: list[DiscoveryEntry] = []
    problems: dict[str, str] = {}
    try:
        handle = held(folder)  # opened once, checked then; read relative to it ever after
        names = [n for n in handle.names() if n.endswith(".json") and not n.startswith(".")]
    except UnsafePathError as exc:
        return [], {str(folder): f"{SkipReason.UNSAFE}: {exc}"[:200]}
    except OSError as exc:
        return [], {str(folder): f"{SkipReason.DIRECTORY}: {type(exc).__name__}: {exc}"[:200]}
    if len(names) > max_files:
        problems[str(folder)] = f"{SkipReason.TOO_MANY_FILES}: {len(names)} files; only {max_files} are read"
    for name in sorted(names)[:max_files]:
        try:
            doc = json.loads(read_in(handle, name, limits.max_discovery_file_bytes).decode("utf-8"))
            entries.append(parse_discovery(doc, allow_remote=allow_remote))
        except (OSError, ValueError, RecursionError) as exc:
            key = name.encode("utf-8", "backslashreplace").decode()[:120]
            problems[key] = f"{_reason(exc)}: {exc}"[:200]
    entries.sort(key=lambda e: (e.worker, e.dp_rank, e.tp_rank, e.pp_rank))
    return entries, problems


_BY_KIND: tuple[tuple[type[BaseException], SkipReason], ...] = (
    (NotRegularFileError, SkipReason.NOT_REGULAR),
    (UnsafePathError, SkipReason.UNSAFE),
    (FileTooLargeError, SkipReason.TOO_LARGE),
)


def _reason(exc: BaseException) -> SkipReason:
    """The bounded reason of one file's failure (most specific first)."""
    if isinstance(exc, OSError) and exc.errno == errno.ELOOP:
        return SkipReason.NOT_REGULAR  # O_NOFOLLOW refuses a symbolic link with ELOOP
    for kind, reason in _BY_KIND:
        if isinstance(exc, kind):
            return reason
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
