"""What an SGLang log record says: batch statistics, pool capacities and incidents.  Pure.

Batch lines of every release (reference §5.3; the heads per family are in
:data:`~poolwatch.sources.sglang_log.formats.BATCH_HEADS`): ``Prefill batch. #new-seq: 1, ...``
and ``Decode batch. #running-req: 3, #token: 1032, token usage: 0.01, ...`` before 0.5.4,
``new fill batch. #seq: 1. ...`` in 0.1.x, and e.g. 0.5.4.post1 PD prefill::

    Prefill batch, #new-seq: 1, #new-token: 8192, #cached-token: 0, full token usage: 0.01,
    mamba usage: 0.01, #running-req: 0, #queue-req: 0, #prealloc-req: 0, #inflight-req: 1, ...

and a 0.5.12 decode line::

    Decode batch [1203], #running-req: 4, #full token: 2048, full token usage: 0.00, mamba num: 8,
    mamba usage: 0.02, cuda graph: True, gen throughput (token/s): 210.55, #queue-req: 0

Decode lines carry used counts (``#token``, ``#full token``, ``#swa token``, ``mamba num``);
prefill lines carry only ratios rounded to two places, of which only a leading ``-`` is
certain (``-0.00`` is a surplus of at least one slot).  Startup lines give pool sizes:
``max_total_num_tokens=N, ...`` and ``Mamba Cache is allocated. max_mamba_cache_size: N, ...``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from poolwatch.model import Incident, IncidentKind, Pool, Role
from poolwatch.sources.sglang_log.formats import BATCH_HEADS, CRASH_MARKERS, ROLE_KEYS
from poolwatch.sources.sglang_log.leak_message import find_incidents
from poolwatch.sources.sglang_log.lines import Ranks
from poolwatch.sources.sglang_log.records import LogRecord

__all__ = ["BatchStats", "Capacity", "LogEvent", "RankIncident", "interpret", "parse_batch_line"]

_CAPACITY = (
    (re.compile(r"^max_total_num_tokens=(\d+),"), Pool.FULL),
    (re.compile(r"^Mamba Cache is allocated\. max_mamba_cache_size: (\d+)"), Pool.MAMBA),
)
_MAX_MESSAGE = 2000

_USED_KEYS = {"#token": Pool.FULL, "#full token": Pool.FULL, "#swa token": Pool.SWA, "mamba num": Pool.MAMBA}
_USAGE_KEYS = {
    "token usage": Pool.FULL,
    "full token usage": Pool.FULL,
    "swa token usage": Pool.SWA,
    "mamba usage": Pool.MAMBA,
}
# Queue names as the probe reports them.  "#prealloc-req" on a prefill line is the bootstrap queue.
_QUEUE_KEYS = {
    "#running-req": "running",
    "#queue-req": "waiting",
    "#bootstrap-req": "bootstrap",
    "#inflight-req": "inflight",
    "#transfer-req": "transfer",
    "#retracted-req": "retracted",
    "#unbootstrapped-req": "bootstrap",  # 0.4.6-0.5.2 PD prefill
    "#transferring-req": "inflight",
    "#remaining_req": "waiting",  # 0.1.x
    "#running_req": "running",
}


@dataclass(frozen=True, slots=True)
class BatchStats:
    """One ``Prefill batch`` / ``Decode batch`` line."""

    at: float
    ranks: Ranks
    kind: str  # "prefill" or "decode"
    iteration: int | None = None
    used: Mapping[Pool, int] = field(default_factory=dict)
    usage: Mapping[Pool, float] = field(default_factory=dict)
    negative: frozenset[Pool] = frozenset()  # ratios printed with a leading "-"
    queues: Mapping[str, int] = field(default_factory=dict)
    role: Role | None = None  # what the line's PD fields reveal


@dataclass(frozen=True, slots=True)
class Capacity:
    """A pool size from a startup line; it also marks a (re)start of the scheduler."""

    at: float
    ranks: Ranks
    pool: Pool
    size: int


@dataclass(frozen=True, slots=True)
class RankIncident:
    ranks: Ranks
    incident: Incident


LogEvent = BatchStats | Capacity | RankIncident


def interpret(record: LogRecord) -> list[LogEvent]:
    """The events of one record (most records are none of these and give ``[]``)."""
    events: list[LogEvent] = []
    if record.headless:  # 0.1.x wrote no prefix at all: any line may be a batch line
        events += [b for line in record.lines if (b := parse_batch_line(line, record.at, record.ranks))]
    else:
        head = _head_event(record)
        if head is not None:
            if not record.continuation:
                return [head]  # a batch or startup line is one line: nothing else to look for
            events.append(head)  # lines after it belong to something else (an interleaved report)
    events += [RankIncident(record.ranks, i) for i in find_incidents(record.lines, record.at)]
    if any(marker in record.message for marker, _ in CRASH_MARKERS):
        text = "\n".join(record.lines)[:_MAX_MESSAGE]
        events.append(RankIncident(record.ranks, Incident(IncidentKind.SCHEDULER_EXCEPTION, text, record.at)))
    return events


def _head_event(record: LogRecord) -> BatchStats | Capacity | None:
    batch = parse_batch_line(record.message, record.at, record.ranks)
    if batch is not None:
        return batch
    for pattern, pool in _CAPACITY:
        m = pattern.match(record.message)
        if m is not None:
            return Capacity(record.at, record.ranks, pool, int(m[1]))
    return None


def parse_batch_line(message: str, at: float, ranks: Ranks) -> BatchStats | None:
    """A batch statistics line of any release, or ``None`` when ``message`` is not one."""
    if "batch" not in message:
        return None
    for head, separator in BATCH_HEADS:
        m = head.match(message)
        if m is not None:
            kind = "decode" if m["kind"] == "Decode" else "prefill"
            iteration = int(m["iter"]) if m.groupdict().get("iter") else None
            return _batch(kind, iteration, _items(message[m.end() :].rstrip(), separator), at, ranks)
    return None


def _batch(kind: str, iteration: int | None, items: dict[str, str], at: float, ranks: Ranks) -> BatchStats:
    used = {pool: v for k, pool in _USED_KEYS.items() if (v := _int(items.get(k))) is not None}
    usage = {pool: r for k, pool in _USAGE_KEYS.items() if (r := _float(items.get(k))) is not None}
    negative = frozenset(pool for k, pool in _USAGE_KEYS.items() if items.get(k, "").startswith("-"))
    queues = {name: v for k, name in _QUEUE_KEYS.items() if (v := _int(items.get(k))) is not None}
    prealloc = _int(items.get("#prealloc-req"))
    if prealloc is not None:
        queues["bootstrap" if kind == "prefill" else "prealloc"] = prealloc
    return BatchStats(at, ranks, kind, iteration, used, usage, negative, queues, _role(items))


def _items(body: str, separator: str = ", ") -> dict[str, str]:
    """``key: value`` pairs of a batch line (values as written, without a trailing ``%`` or ``.``)."""
    out: dict[str, str] = {}
    for part in body.split(separator):
        key, sep, value = part.partition(": ")
        if sep:
            out.setdefault(key.strip(), value.strip().rstrip(",%").removesuffix("."))
    return out


def _role(items: Mapping[str, str]) -> Role | None:
    for key, role in ROLE_KEYS.items():
        if key in items:
            return Role(role)
    return None


def _int(value: str | None) -> int | None:
    digits = None if value is None else value.removeprefix("-")
    if value is None or not digits or not (digits.isascii() and digits.isdigit()):
        return None
    return int(value)


def _float(value: str | None) -> float | None:
    digits = None if value is None else value.removeprefix("-").replace(".", "", 1)
    if value is None or not digits or not (digits.isascii() and digits.isdigit()):
        return None
    return float(value)
