"""Final snapshots: a rank's last word before SGLang's idle check kills it.

A rank about to fail SGLang's strict idle check (fully idle, a pool out of balance) writes the
``poolwatch.snapshot`` document that proves it beside its discovery file, as
``<worker>-dp<D>-tp<T>-pp<P>.final`` (:func:`final_name`; not ``*.json``, so never read as an
entry), atomically and synchronously (:func:`write_final`).  The sidecar reads them with
:func:`read_final` and :func:`read_final_dir` (bounded: regular files of at most
:data:`MAX_FINAL_BYTES`, at most :data:`~poolwatch.discovery.files.MAX_FILES` a directory).  Stdlib
only: the in-process probe imports it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from poolwatch.discovery.entry import discovery_name
from poolwatch.discovery.files import MAX_FILES, read_bounded

__all__ = ["FINAL_SUFFIX", "MAX_FINAL_BYTES", "final_name", "read_final", "read_final_dir", "write_final"]

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
    the caller validates the document with :func:`poolwatch.codec.snapshot.parse_snapshot`)."""
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
