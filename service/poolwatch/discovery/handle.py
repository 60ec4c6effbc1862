"""The discovery directory opened once, and every file in it read and written relative to it.

Checking a path and then using it leaves a gap: between the two, anyone who may rename a directory
on the path can swap in another.  So a directory is opened by walking its resolved path one
component at a time (``openat`` with ``O_NOFOLLOW``; a link above it is followed to its target,
which is what is checked, but the directory itself must not be one), each component checked as it
is opened (:func:`~poolwatch.discovery.safety.check_ancestors`' rule for those above: a trusted owner's, and
writable by no one else or sticky; :func:`~poolwatch.discovery.safety.check_directory`'s for the
directory itself), and the descriptor is kept: every later list, read, write, rename and removal is
relative to it.  A directory someone replaces afterwards is not the one read: the probe keeps
writing, and the sidecar keeps reading, the directory they opened (a dying rank's last word still
arrives), while :meth:`DirectoryHandle.status` says the path no longer names it (``unsafe``).

:func:`held` keeps one handle per path for the process (the probe and the sidecar call the
contract's functions with paths); a held directory that was removed is opened again by its path.
Stdlib only: the in-process probe imports it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
from pathlib import Path

from poolwatch.discovery.safety import UnsafePathError, ancestor_problem, owner_problem, trusted_owners

__all__ = ["DirectoryHandle", "held"]

_PATH = getattr(os, "O_PATH", os.O_RDONLY)  # walk through a directory without reading it
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_FILE = os.O_NOFOLLOW | os.O_NONBLOCK
_SWEEP_AT = 64  # handles held before removed directories' handles are let go


class DirectoryHandle:
    """One directory, opened safely once (:meth:`open`); its files by name, relative to it."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path, self.fd = path, fd
        info = os.fstat(fd)
        self.identity = (info.st_dev, info.st_ino)

    @classmethod
    def open(cls, path: str | Path, owners: frozenset[int] | None = None) -> DirectoryHandle:
        """Open ``path`` as the module's docstring says; ``FileNotFoundError`` when it does not
        exist, :class:`UnsafePathError` naming the directory someone else could have written."""
        owners = trusted_owners() if owners is None else owners
        if os.path.islink(path):  # the directory itself a link: whoever made it chose where it leads
            raise UnsafePathError(f"{path}: not a directory (a symbolic link); refused (never adopted)")
        real = Path(os.path.realpath(path))
        chain = [*reversed(real.parents), real]  # "/" first
        fd = os.open(chain[0], _DIR if len(chain) == 1 else _PATH | os.O_DIRECTORY)
        try:
            for folder in chain:
                if folder != chain[0]:  # the next component, opened relative to the one above it
                    flags = _DIR if folder == real else _PATH | os.O_DIRECTORY | os.O_NOFOLLOW
                    fd, above = os.open(folder.name, flags, dir_fd=fd), fd
                    os.close(above)
                rule = owner_problem if folder == real else ancestor_problem
                problem = rule(os.fstat(fd), owners)
                if problem is not None:
                    raise UnsafePathError(f"{folder}: {problem}; refused (never adopted)")
        except BaseException:
            os.close(fd)
            raise
        return cls(Path(path), fd)

    def check(self) -> None:
        """Raise :class:`UnsafePathError` when the directory itself has become another's, or
        writable by group or others (what is in it then proves nothing)."""
        problem = owner_problem(os.fstat(self.fd), trusted_owners())
        if problem is not None:
            raise UnsafePathError(f"{self.path}: {problem}; refused")

    def gone(self) -> bool:
        """Whether the directory was removed (its descriptor is all that is left of it)."""
        try:
            return os.fstat(self.fd).st_nlink == 0
        except OSError:
            return True

    def status(self) -> str:
        """``ok`` while the path still names this directory and would pass the checks again;
        ``unsafe`` when it names another, or one someone else could write; ``missing`` when
        neither the path nor this directory is there any more."""
        try:
            other = DirectoryHandle.open(self.path)
        except FileNotFoundError:
            return "missing" if self.gone() else "unsafe"
        except OSError:  # UnsafePathError, or not a directory any more
            return "unsafe"
        same = other.identity == self.identity
        other.close()
        return "ok" if same else "unsafe"

    def names(self) -> list[str]:
        return os.listdir(self.fd)

    def lstat(self, name: str) -> os.stat_result:
        return os.stat(name, dir_fd=self.fd, follow_symlinks=False)

    def open_file(self, name: str) -> int:
        """A read-only descriptor of ``name`` (no link followed, never blocking on a FIFO)."""
        return os.open(name, os.O_RDONLY | _FILE, dir_fd=self.fd)

    def write(self, name: str, data: bytes, mode: int = 0o644, *, replace: bool = True) -> None:
        """``name`` atomically holds ``data`` (a private temporary file, then a rename); with
        ``replace=False`` an existing ``name`` is kept (``FileExistsError``): the first writer wins."""
        tmp = f".{name}.{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _FILE, mode, dir_fd=self.fd)
        try:
            try:
                os.fchmod(fd, mode)  # whatever the umask
                os.write(fd, data)
            finally:
                os.close(fd)
            if replace:
                os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            else:
                os.link(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd, follow_symlinks=False)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=self.fd)

    def remove(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=self.fd)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


_held: dict[str, DirectoryHandle] = {}
_lock = threading.Lock()


def held(path: str | Path) -> DirectoryHandle:
    """This process's handle of ``path``, opened the first time it is asked for (and again when the
    directory it held was removed); raises like :meth:`DirectoryHandle.open`, and
    :class:`UnsafePathError` while the held directory itself has become writable by someone else
    (it stays held: a later ``chmod`` back makes it usable again)."""
    key = os.path.abspath(path)
    with _lock:
        handle = _held.get(key)
        if handle is not None and not handle.gone():
            handle.check()
            return handle
        if handle is not None:
            handle.close()
            del _held[key]
        if len(_held) >= _SWEEP_AT:
            _sweep()
        handle = _held[key] = DirectoryHandle.open(key)
        return handle


def _sweep() -> None:
    """Let go of the handles of directories that were removed (tests make many)."""
    for key in [k for k, h in _held.items() if h.gone()]:
        _held.pop(key).close()
