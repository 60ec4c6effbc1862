"""The alert state file on disk: read and written only where no one else could have written it.

The state file says which alerts fire and which notices a receiver is still owed, and what it says
is sent to Alertmanager after a restart; so it is held to the discovery directory's ownership rules
(:mod:`poolwatch.discovery.safety`): its directory is this user's or root's and writable by no
one else, or sticky (as ``/tmp``: then no one else can replace an entry of ours), and the file is
this user's or root's and writable by no one else.  (Only its own directory is checked, not those
above it as for the probe directory: a file someone else wrote is refused by its owner wherever it
comes from, and a sidecar's state volume is an ``emptyDir`` whose world-writable root it cannot
make sticky; the shipped manifests keep the file in a directory of its own, ``/tmp/poolwatch``.)
A file planted by another user (or one in a directory anyone may rewrite) is refused with
:class:`~poolwatch.discovery.safety.UnsafePathError`, never read, never written over.

A read opens the file without following a link and without blocking (a FIFO at the path would
otherwise hang the start) and reads at most ``limit + 1`` bytes.  A write goes to a temporary file
beside it (``.<name>.<random>.tmp``, created exclusively, mode 0600), synced, then renamed over the
file; a write killed half-way leaves its temporary file, and :func:`remove_stale_temps` removes
such files of ours at the next start.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
from pathlib import Path

from poolwatch.discovery.safety import UnsafePathError, check_file, check_holder

__all__ = ["read_state_bytes", "remove_stale_temps", "write_state_bytes"]

_TEMP = ".{name}.{token}.tmp"
_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK


def _check_directory(path: Path) -> None:
    """No one else may replace what is in the state file's directory."""
    check_holder(path.parent)


def read_state_bytes(path: Path, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of the state file; ``FileNotFoundError`` when there is none,
    :class:`UnsafePathError` when it or its directory could have been written by someone else,
    another ``OSError`` when it is not a regular file or cannot be read."""
    _check_directory(path)
    fd = os.open(path, os.O_RDONLY | _FLAGS)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{path}: not a regular file")
        check_file(info)
        chunks, left = [], limit + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_state_bytes(path: Path, data: bytes) -> None:
    """Replace the state file with ``data`` atomically (see the module's docstring); raises
    :class:`UnsafePathError` (an ``OSError``) when the directory is not safe to write in."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    _check_directory(path)
    tmp = path.with_name(_TEMP.format(name=path.name, token=secrets.token_hex(6)))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _FLAGS, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def remove_stale_temps(path: Path) -> list[str]:
    """Remove the temporary files a killed write of ``path`` left (ours only: this user's regular
    files named as :func:`write_state_bytes` names them, or as ``tempfile`` did before); returns
    their names.  Nothing is removed from a directory that is not safe."""
    try:
        _check_directory(path)
        names = os.listdir(path.parent)
    except (OSError, UnsafePathError):
        return []
    pattern = re.compile(rf"\.{re.escape(path.name)}\.(?:[0-9a-f]{{12}}\.tmp|[a-z0-9_]{{8}})")
    removed = []
    for name in names:
        if not pattern.fullmatch(name):
            continue
        with contextlib.suppress(OSError):
            info = os.lstat(path.parent / name)
            if stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid():
                os.unlink(path.parent / name)
                removed.append(name)
    return sorted(removed)
