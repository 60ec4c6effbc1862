"""Reading the discovery directory's files safely, and the node's probe secret kept there.

:func:`read_bounded` is the one way the contract reads a file of the directory (a discovery file,
the secret, a final snapshot): regular files only, opened without following a symbolic link and
without blocking (a FIFO or device is refused, :class:`NotRegularFileError`), and never more than
a given size (:class:`FileTooLargeError`).  :data:`MAX_FILE_BYTES` and :data:`MAX_FILES` are the
default bounds of one scan (:data:`poolwatch.limits.DEFAULT_LIMITS`).

Every file read so, and the directory itself, must be this user's or root's and writable by no
one else (:mod:`poolwatch.discovery.safety`; :class:`~poolwatch.discovery.safety.UnsafePathError`
otherwise), and every directory above it must let no one else replace it; the directory is opened
once and its files are read and written relative to it (:mod:`poolwatch.discovery.handle`).
The secret (:data:`SECRET_FILE`, mode 0600, created once by whichever rank comes
first) is the key of the probe's mutating endpoints and of the final snapshots' signatures; it is
proven, never sent (:mod:`poolwatch.discovery.auth`).  Stdlib only: the in-process probe
imports it.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
from pathlib import Path

from poolwatch.discovery.handle import DirectoryHandle, held
from poolwatch.discovery.safety import UnsafePathError, check_file, make_directory
from poolwatch.limits import DEFAULT_LIMITS

__all__ = [
    "MAX_FILES",
    "MAX_FILE_BYTES",
    "SECRET_FILE",
    "FileTooLargeError",
    "NotRegularFileError",
    "ensure_secret",
    "load_secret",
    "read_bounded",
    "read_in",
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


def read_bounded(path: Path, limit: int, *, private: bool = False) -> bytes:
    """A regular file's bytes, at most ``limit``, read relative to its directory's handle
    (:func:`~poolwatch.discovery.handle.held`); a FIFO, device, socket or symlink is refused
    without blocking (``ValueError``), and so is a bigger file, and one someone else could have
    written (:class:`~poolwatch.discovery.safety.UnsafePathError`; ``private``: or read)."""
    return read_in(held(path.parent), path.name, limit, private=private)


def read_in(folder: DirectoryHandle, name: str, limit: int, *, private: bool = False) -> bytes:
    """:func:`read_bounded` of ``name`` in the directory ``folder`` holds."""
    fd = folder.open_file(name)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFileError("not a regular file")
        check_file(info, private=private, group=private and _setgid(folder))
        if info.st_size > limit:
            raise FileTooLargeError(f"larger than {limit} bytes")
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise FileTooLargeError(f"larger than {limit} bytes")
    return data


def _setgid(folder: DirectoryHandle) -> bool:
    try:
        return bool(os.fstat(folder.fd).st_mode & stat.S_ISGID)
    except OSError:
        return False


def ensure_secret(directory: str | Path) -> str:
    """The node's probe secret (created once, mode 0600, by whichever rank comes first), in a
    directory that passes :func:`~poolwatch.discovery.safety.check_directory`; a directory or a
    secret someone else could have planted raises
    :class:`~poolwatch.discovery.safety.UnsafePathError` (never adopted)."""
    folder = Path(directory)
    make_directory(folder)
    found = load_secret(folder)
    if found is not None:
        return found
    handle = held(folder)
    mode = 0o640 if _setgid(handle) else 0o600  # a set-group-id directory: the pod's fsGroup reads it
    with contextlib.suppress(FileExistsError):  # another rank won the race: use its secret
        handle.write(SECRET_FILE, secrets.token_hex(32).encode("ascii"), mode, replace=False)
    found = load_secret(folder)
    if found is None:
        raise OSError(f"{folder / SECRET_FILE}: not a readable secret")
    return found


def load_secret(directory: str | Path) -> str | None:
    """The node's secret; ``None`` when there is none (absent, unreadable, not a secret's shape);
    :class:`~poolwatch.discovery.safety.UnsafePathError` when the directory or the file could have
    been written (or the file read) by someone else."""
    try:
        text = read_in(held(directory), SECRET_FILE, 256, private=True).decode("ascii").strip()
    except UnsafePathError:
        raise
    except (OSError, ValueError):
        return None
    return text if _SECRET.fullmatch(text) else None


def read_secret(directory: str | Path) -> str | None:
    """:func:`load_secret`, with an unsafe directory or file as none."""
    try:
        return load_secret(directory)
    except UnsafePathError:
        return None
