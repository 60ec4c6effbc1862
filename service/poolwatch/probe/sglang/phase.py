"""Queue depths and the phase in SGLang's *fully idle* sense (0.5.23 ``is_fully_idle``, §1.1).

``idle`` needs every place a request can wait or hold slots to be empty: the running batch, the
chunked request, the last batch, the overlap result queue, the waiting and grammar queues and, in
PD, the bootstrap/inflight (prefill) or prealloc/retracted/transfer (decode) queues.  The older
"no batch formed this iteration" meaning is *not* used: it calls a rank idle while waiting
requests still hold copy-on-write Mamba slots.  A queue that cannot be read makes the phase
``unknown`` rather than a guess.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from poolwatch.model.rank import Phase
from poolwatch.probe.core.reading import Reading

__all__ = ["gate_readings", "phase_of", "queue_depths"]


def _batch_len(batch: Any) -> int:
    return 0 if batch is None else len(batch.reqs)


def _grammar_len(sched: Any) -> int:
    manager = getattr(sched, "grammar_manager", None)
    if manager is not None:
        return len(manager.grammar_queue)
    return len(sched.grammar_queue)


def _optional_len(sched: Any, path: str) -> int:
    """Length of an attribute that only some builds have (0 when absent)."""
    obj: Any = sched
    for name in path.split("."):
        obj = getattr(obj, name, None)
        if obj is None:
            return 0
    return len(obj)


def _probe_table(role: str) -> dict[str, Callable[[Any], int]]:
    probes: dict[str, Callable[[Any], int]] = {
        "running": lambda s: _batch_len(s.running_batch),
        "waiting": lambda s: len(s.waiting_queue),
        "grammar": _grammar_len,
        "chunked": lambda s: 0 if s.chunked_req is None else 1,
        "last_batch": lambda s: _batch_len(s.last_batch),
        "result_queue": lambda s: _optional_len(s, "result_queue"),
    }
    if role == "prefill":
        probes["prefill_bootstrap"] = lambda s: len(s.disagg_prefill_bootstrap_queue.queue)
        probes["prefill_inflight"] = lambda s: len(s.disagg_prefill_inflight_queue)
    if role == "decode":
        probes["decode_prealloc"] = lambda s: len(s.disagg_decode_prealloc_queue.queue)
        probes["decode_retracted"] = lambda s: _optional_len(
            s, "disagg_decode_prealloc_queue.retracted_queue"
        )
        probes["decode_transfer"] = lambda s: len(s.disagg_decode_transfer_queue.queue)
        probes["decode_offload"] = lambda s: _optional_len(s, "decode_offload_manager.ongoing_offload")
    return probes


@functools.lru_cache(maxsize=8)
def _probes(role: str) -> tuple[tuple[str, str, Callable[[Any], int]], ...]:
    """``(queue, failure label, reader)`` of each queue ``role`` has (built once per role)."""
    return tuple((name, f"queue.{name}", probe) for name, probe in _probe_table(role).items())


def queue_depths(sched: Any, reading: Reading, role: str) -> dict[str, int | None]:
    """Depth of each queue this role has; ``None`` for one that could not be read."""
    out: dict[str, int | None] = {}
    for name, label, probe in _probes(role):
        try:
            value = probe(sched)
        except Exception as exc:  # noted like Reading.guard does
            reading.fail(label, exc)
            out[name] = None
            continue
        out[name] = int(value)
    return out


def gate_readings(sched: Any, reading: Reading, role: str) -> dict[str, int | None]:
    """What SGLang's idle check skips on besides the PD queues, kept out of the phase (they say
    nothing about requests waiting): ``hisparse`` 1 when HiSparse is on (0.5.10+), its staging
    queue ``hisparse_staging`` and, on a decode rank, 0.5.19+'s held ``deferred_releases``; ``None``
    for one that could not be read (absent attributes read 0: a release without the feature)."""
    table: dict[str, Callable[[Any], int]] = {
        "hisparse": lambda s: int(bool(getattr(s, "enable_hisparse", False))),
        "hisparse_staging": lambda s: _optional_len(s, "hisparse_coordinator.ack_staging_queue"),
    }
    if role == "decode":
        table["deferred_releases"] = lambda s: _optional_len(
            s, "disagg_decode_transfer_queue._deferred_releases"
        )
    out: dict[str, int | None] = {}
    for name, read in table.items():
        try:
            out[name] = int(read(sched))
        except Exception as exc:  # noted like Reading.guard does
            reading.fail(f"gate.{name}", exc)
            out[name] = None
    return out


def phase_of(depths: dict[str, int | None]) -> Phase:
    """``idle`` iff every queue is known and empty; ``unknown`` if one could not be read."""
    if any(v is None for v in depths.values()):
        return Phase.UNKNOWN
    return Phase.IDLE if all(v == 0 for v in depths.values()) else Phase.BUSY
