"""Who may write the discovery directory: its owner and mode, checked before anything in it is
trusted (stdlib only; the in-process probe imports it).

The directory holds the node's probe secret (the kill switch's key), the discovery files (where
the sidecar connects) and the final snapshots (what pages).  So poolwatch adopts a directory --
and a file in it -- only when it is owned by this process's user or by root
(:func:`trusted_owners`) and no one else may write it (no group or other write bit).  A directory
someone else made first (``/tmp/poolwatch`` planted by another local user), a world-writable one
(a bare Kubernetes ``emptyDir``), or a symbolic link is refused with :class:`UnsafePathError`
naming why; the probe then neither announces itself nor adopts a secret there, and the sidecar
reads nothing from it (``poolwatch_discovery_skipped_files{reason="unsafe"}``).  The secret must
also be unreadable by others (0600, or 0640 in a set-group-id directory: the pod's shared group).

:func:`default_directory` is where probe and sidecar meet when ``POOLWATCH_PROBE_DIR`` is unset:
``/run/poolwatch`` when this user may write there, else ``$XDG_RUNTIME_DIR/poolwatch``, else
``/tmp/poolwatch`` (checked like any other).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Mapping
from pathlib import Path

__all__ = [
    "UnsafePathError",
    "ancestor_problem",
    "check_ancestors",
    "check_directory",
    "check_file",
    "check_holder",
    "default_directory",
    "make_directory",
    "owner_problem",
    "secret_mode",
    "trusted_owners",
]

_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


class UnsafePathError(PermissionError):
    """A directory or file that someone other than this user or root could have written."""


def trusted_owners() -> frozenset[int]:
    """The owners whose files are trusted: this process's effective user and root."""
    return frozenset({os.geteuid(), 0})


def owner_problem(info: os.stat_result, owners: frozenset[int]) -> str | None:
    """Why a directory or file of the contract is not trusted (``None``: it is): another owner,
    or writable by group or others."""
    if info.st_uid not in owners:
        allowed = " or ".join(f"uid {u}" for u in sorted(owners))
        return f"owned by uid {info.st_uid}, not {allowed}"
    if info.st_mode & _OTHERS_WRITE:
        return f"writable by group or others (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def check_directory(path: str | Path, owners: frozenset[int] | None = None) -> None:
    """Raise :class:`UnsafePathError` unless ``path`` is a real directory (not a link) that only a
    trusted owner may write; ``FileNotFoundError`` when it does not exist."""
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise UnsafePathError(f"{path}: not a directory (a symbolic link or a file)")
    problem = owner_problem(info, trusted_owners() if owners is None else owners)
    if problem is not None:
        raise UnsafePathError(f"{path}: {problem}; refused (never adopted)")


def check_ancestors(
    path: str | Path, owners: frozenset[int] | None = None, *, inclusive: bool = False
) -> None:
    """Raise :class:`UnsafePathError` unless no one else could replace ``path`` by renaming
    something above it: every directory above it (``inclusive``: and ``path`` itself), resolved,
    is a trusted owner's and writable by no one else, or sticky (as ``/tmp``: then only an entry's
    owner may rename it)."""
    real = Path(os.path.realpath(path))
    for folder in [*reversed(real.parents), *([real] if inclusive else [])]:
        check_holder(folder, owners)


def check_holder(folder: str | Path, owners: frozenset[int] | None = None) -> None:
    """Raise :class:`UnsafePathError` unless ``folder`` (a directory that holds something of ours)
    is a trusted owner's and writable by no one else, or sticky: no one else can replace what is
    in it."""
    problem = ancestor_problem(os.stat(folder), trusted_owners() if owners is None else owners)
    if problem is not None:
        raise UnsafePathError(f"{folder}: {problem}; what is in it could be replaced by another user")


def ancestor_problem(info: os.stat_result, owners: frozenset[int]) -> str | None:
    """Why a directory above one of the contract's lets someone else replace what is in it
    (``None``: it does not): another owner, or writable by others without the sticky bit."""
    if info.st_uid not in owners:
        allowed = " or ".join(f"uid {u}" for u in sorted(owners))
        return f"owned by uid {info.st_uid}, not {allowed}"
    if info.st_mode & _OTHERS_WRITE and not info.st_mode & stat.S_ISVTX:
        return f"writable by group or others without the sticky bit (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def check_file(
    info: os.stat_result, owners: frozenset[int] | None = None, *, private: bool = False, group: bool = False
) -> None:
    """Raise :class:`UnsafePathError` unless the file ``info`` describes is a trusted owner's and
    not writable by others; ``private`` (the secret): readable by no one else either, but its group
    when ``group`` (a set-group-id directory, see :func:`secret_mode`)."""
    problem = owner_problem(info, trusted_owners() if owners is None else owners)
    hidden = stat.S_IRWXO | stat.S_IXGRP | (0 if group else stat.S_IRGRP)
    if problem is None and private and info.st_mode & hidden:
        problem = f"readable by others (mode {stat.S_IMODE(info.st_mode):04o}; a secret is 0600)"
    if problem is not None:
        raise UnsafePathError(f"{problem}; refused")


def secret_mode(directory: str | Path) -> int:
    """0600; 0640 in a set-group-id directory (a pod's ``fsGroup``: the sidecar reads it by group)."""
    return 0o640 if os.stat(directory).st_mode & stat.S_ISGID else 0o600


def make_directory(path: str | Path) -> None:
    """Create ``path`` (mode 0755 before the umask; parents too) unless it exists, seal its parent
    when that is this user's and anyone may write it (the sticky bit, as ``/tmp`` has: a
    Kubernetes ``emptyDir``'s root is world-writable), then check it and every directory above it."""
    folder = Path(path)
    with contextlib.suppress(FileExistsError):  # a file, or a dangling link, where it should be
        os.makedirs(folder, mode=0o755, exist_ok=True)
    _seal(folder.parent)
    check_ancestors(folder)
    check_directory(folder)


def _seal(folder: Path) -> None:
    """Set the sticky bit on ``folder`` when it is this user's and writable by others without it:
    then no one else can rename or remove the directory made in it."""
    with contextlib.suppress(OSError):
        info = os.stat(folder)
        open_to_others = info.st_mode & _OTHERS_WRITE and not info.st_mode & stat.S_ISVTX
        if open_to_others and info.st_uid == os.geteuid():
            os.chmod(folder, stat.S_IMODE(info.st_mode) | stat.S_ISVTX)


def default_directory(
    environ: Mapping[str, str], writable: Callable[[str], bool] | None = None, run: str = "/run"
) -> str:
    """The discovery directory when none is configured (see the module's docstring)."""
    can_write = writable or (lambda p: os.access(p, os.W_OK))
    own = os.path.join(run, "poolwatch")
    if (os.path.isdir(own) and can_write(own)) or (not os.path.lexists(own) and can_write(run)):
        return own
    runtime = environ.get("XDG_RUNTIME_DIR", "")
    if runtime.startswith("/") and os.path.isdir(runtime) and can_write(runtime):
        return os.path.join(runtime, "poolwatch")
    return "/tmp/poolwatch"
