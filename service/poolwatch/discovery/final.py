"""Final snapshots: a rank's last word before SGLang's idle check kills it.

A rank about to fail SGLang's strict idle check (fully idle, a pool out of balance) writes the
``poolwatch.snapshot`` document that proves it beside its discovery file, as
``<worker>-dp<D>-tp<T>-pp<P>.final`` (:func:`final_name`; not ``*.json``, so never read as an
entry), atomically and synchronously (:func:`write_final`), signed with the node's secret: the
file is one line ``poolwatch-final-v1 <HMAC-SHA256(secret, context, file name, payload)>`` and
then the payload (:func:`sign_final`).  The payload names the rank's boot id and the time it was
taken, so the signature binds the file to one life of one rank at one moment; the sidecar checks
the age and the boot (:mod:`poolwatch.sources.final`).  :func:`read_final` refuses a file without
a valid signature (:class:`ForgedFinalError`), and every read is bounded (regular files of at most
:data:`MAX_FINAL_BYTES` that only a trusted owner could write, at most
:data:`~poolwatch.discovery.files.MAX_FILES` a directory).  Stdlib only: the in-process probe
imports it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from pathlib import Path
from typing import Any

from poolwatch.discovery.entry import discovery_name
from poolwatch.discovery.files import MAX_FILES, read_in
from poolwatch.discovery.handle import held

__all__ = [
    "FINAL_SUFFIX",
    "MAX_FINAL_BYTES",
    "ForgedFinalError",
    "final_name",
    "final_names",
    "final_stat",
    "read_final",
    "read_final_dir",
    "sign_final",
    "write_final",
]

FINAL_SUFFIX = ".final"  # "<worker>-dp<D>-tp<T>-pp<P>.final": not *.json, so never read as an entry
MAX_FINAL_BYTES = 1 << 20
_MAGIC = b"poolwatch-final-v1 "
_CONTEXT = b"poolwatch-final-v1\n"


class ForgedFinalError(ValueError):
    """A final snapshot without a valid signature of the node's secret (forged, or unsigned)."""


def final_name(worker: str, dp_rank: int, tp_rank: int, pp_rank: int) -> str:
    """The final-snapshot file of a rank, beside its discovery file."""
    return discovery_name(worker, dp_rank, tp_rank, pp_rank).removesuffix(".json") + FINAL_SUFFIX


def _mac(secret: str, name: str, payload: bytes) -> bytes:
    message = _CONTEXT + name.encode("utf-8", "surrogatepass") + b"\n" + payload
    return hmac.new(secret.encode("ascii"), message, hashlib.sha256).hexdigest().encode("ascii")


def sign_final(secret: str, name: str, payload: bytes) -> bytes:
    """The file's bytes: the signature line, then ``payload``."""
    return _MAGIC + _mac(secret, name, payload) + b"\n" + payload


def write_final(directory: str | Path, name: str, payload: bytes, secret: str) -> Path:
    """Write ``payload`` (the ``poolwatch.snapshot`` JSON) signed, as ``name``, atomically and
    synchronously: a per-rank temporary file, then ``os.replace``.  No ``fsync``: what follows is
    the process's crash, not the machine's, and the page cache outlives the process."""
    folder = Path(directory)
    # the directory this process opened (checked then): a directory someone swapped in since is not it
    held(folder).write(name, sign_final(secret, name, payload), 0o644)
    return folder / name


def read_final(path: str | Path, secret: str) -> Any:
    """One final snapshot file, its signature checked, decoded (``OSError`` when absent or
    unreadable, :class:`ForgedFinalError` when not signed with ``secret``, ``ValueError``)."""
    where = Path(path)
    raw = read_in(held(where.parent), where.name, MAX_FINAL_BYTES)
    head, newline, payload = raw.partition(b"\n")
    if not newline or not head.startswith(_MAGIC):
        raise ForgedFinalError("not signed (no poolwatch-final-v1 line)")
    if not secret or not hmac.compare_digest(head.removeprefix(_MAGIC), _mac(secret, where.name, payload)):
        raise ForgedFinalError("signature does not match the node's secret")
    return json.loads(payload.decode("utf-8"))


def final_names(directory: str | Path) -> list[str]:
    """The final-snapshot file names in ``directory``, sorted, at most ``MAX_FILES``."""
    try:
        names = held(directory).names()
    except OSError:
        return []
    return sorted(n for n in names if n.endswith(FINAL_SUFFIX))[:MAX_FILES]


def final_stat(path: str | Path) -> os.stat_result | None:
    """The ``lstat`` of a final snapshot file, relative to its directory's handle (``None``: none)."""
    where = Path(path)
    try:
        return held(where.parent).lstat(where.name)
    except OSError:
        return None


def read_final_dir(directory: str | Path, secret: str) -> list[tuple[str, Any]]:
    """``(file name, decoded JSON)`` of every validly signed final snapshot in ``directory`` (bad
    files skipped; the caller validates the document with
    :func:`poolwatch.codec.snapshot.parse_snapshot`)."""
    folder = Path(directory)
    found = []
    for name in final_names(folder):
        try:
            found.append((name, read_final(folder / name, secret)))
        except (OSError, ValueError, RecursionError):
            continue
    return found
