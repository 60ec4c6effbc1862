"""A rank's final snapshot as a file: the proof of what kills it, written before it dies.

Any room whose rank is certain to die next writes the snapshot that proves why (SGLang: its strict
idle check will raise; vLLM: a block freed at ``ref_cnt`` 0 fails vLLM's assert at its next
allocation) into the discovery directory, signed with the node's secret
(:func:`poolwatch.discovery.final.write_final`), synchronously in the scheduler thread.  The
sidecar reads it once the rank's endpoint stops answering (:mod:`poolwatch.sources.final`), so
the proof still pages when the process is gone before a long-poll collected it.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace

from poolwatch.codec.snapshot import dump_snapshot
from poolwatch.discovery.files import ensure_secret
from poolwatch.discovery.final import final_name, write_final
from poolwatch.model.snapshot import Snapshot

__all__ = ["write_final_snapshot"]


def write_final_snapshot(directory: str, snap: Snapshot, secret: str | None = None) -> float:
    """Write ``snap`` (marked final) as its rank's final snapshot, signed with the node's ``secret``
    (the one the endpoint holds; when it serves none, the directory's, created if need be);
    returns the seconds it took.  Raises ``OSError`` (an unsafe directory included: nothing is
    written)."""
    started = time.perf_counter()
    w = snap.worker
    doc = dump_snapshot(snap if snap.final else replace(snap, final=True))
    payload = json.dumps(doc, separators=(",", ":")).encode("utf-8")
    name = final_name(w.worker, w.dp_rank, w.tp_rank, w.pp_rank)
    write_final(directory, name, payload, secret or ensure_secret(directory))
    return time.perf_counter() - started
