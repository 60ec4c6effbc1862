"""Reading the discovery directory's files safely, and the node's probe secret kept there.

:func:`read_bounded` is the one way the contract reads a file of the directory (a discovery file,
the secret, a final snapshot): regular files only, opened without following a symbolic link and
without blocking (a FIFO or device is refused, :class:`NotRegularFileError`), and never more than
a given size (:class:`FileTooLargeError`).  :data:`MAX_FILE_BYTES` and :data:`MAX_FILES` are the
default bounds of one scan (:data:`poolwatch.limits.DEFAULT_LIMITS`).

The secret (:data:`SECRET_FILE`, mode 0600, created once by whichever rank comes first) is what
the probe's mutating endpoints ask for (``Authorization: Bearer ...``).  Stdlib only: the
in-process probe imports it.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
import tempfile
from pathlib import Path

from poolwatch.limits import DEFAULT_LIMITS

__all__ = [
    "MAX_FILES",
    "MAX_FILE_BYTES",
    "SECRET_FILE",
    "FileTooLargeError",
    "NotRegularFileError",
    "ensure_secret",
    "read_bounded",
    "read_secret",
]

_SECRET = re.compile(r"[0-9a-f]{32,128}")
SECRET_FILE = "probe-secret"  # in the discovery directory; not *.json, so never read as an entry
MAX_FILE_BYTES = DEFAULT_LIMITS.max_discovery_file_bytes  # a discovery file is ~200 bytes
MAX_FILES = DEFAULT_LIMITS.max_discovery_files  # per scan; more are reported once as one problem


class NotRegularFileError(ValueError):
    """A FIFO, device or socket where a regular file was expected (never read: it could block)."""


class FileTooLargeError(ValueError):
    """A file larger than the reader's limit."""


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
