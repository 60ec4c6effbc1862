"""What an SGLang log record says: batch statistics, pool capacities and incidents.  Pure.

Batch lines of every release (reference §5.3), e.g. 0.5.4.post1 PD prefill::

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
from poolwatch.sources.sglang_log.leak_message import find_incidents
from poolwatch.sources.sglang_log.lines import LogRecord, Ranks

__all__ = ["BatchStats", "Capacity", "LogEvent", "RankIncident", "interpret", "parse_batch_line"]

_BATCH = re.compile(r"^(?P<kind>Prefill|Decode) batch(?: \[(?P<iter>\d+)\])?, (?P<body>.*)$")
_CAPACITY = (
    (re.compile(r"^max_total_num_tokens=(\d+),"), Pool.FULL),
    (re.compile(r"^Mamba Cache is allocated\. max_mamba_cache_size: (\d+)"), Pool.MAMBA),
)
_CRASH = "Scheduler hit an exception"
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
    batch = parse_batch_line(record.message, record.at, record.ranks)
    if batch is not None:
        return [batch]
    for pattern, pool in _CAPACITY:
        m = pattern.match(record.message)
        if m is not None:
            return [Capacity(record.at, record.ranks, pool, int(m[1]))]
    events: list[LogEvent] = [RankIncident(record.ranks, i) for i in find_incidents(record.lines, record.at)]
    if record.message.startswith(_CRASH):
        text = "\n".join(record.lines)[:_MAX_MESSAGE]
        events.append(RankIncident(record.ranks, Incident(IncidentKind.SCHEDULER_EXCEPTION, text, record.at)))
    return events


def parse_batch_line(message: str, at: float, ranks: Ranks) -> BatchStats | None:
    """A batch statistics line, or ``None`` when ``message`` is not one."""
    m = _BATCH.match(message.rstrip())
    if m is None:
        return None
    kind = m["kind"].lower()
    items = _items(m["body"])
    used = {pool: v for k, pool in _USED_KEYS.items() if (v := _int(items.get(k))) is not None}
    usage = {pool: r for k, pool in _USAGE_KEYS.items() if (r := _float(items.get(k))) is not None}
    negative = frozenset(pool for k, pool in _USAGE_KEYS.items() if items.get(k, "").startswith("-"))
    queues = {name: v for k, name in _QUEUE_KEYS.items() if (v := _int(items.get(k))) is not None}
    prealloc = _int(items.get("#prealloc-req"))
    if prealloc is not None:
        queues["bootstrap" if kind == "prefill" else "prealloc"] = prealloc
    iteration = int(m["iter"]) if m["iter"] else None
    return BatchStats(at, ranks, kind, iteration, used, usage, negative, queues, _role(kind, items))


def _items(body: str) -> dict[str, str]:
    """``key: value`` pairs of a batch line (values as written, without a trailing ``%``)."""
    out: dict[str, str] = {}
    for part in body.split(", "):
        key, sep, value = part.partition(": ")
        if sep:
            out.setdefault(key.strip(), value.strip().rstrip(",%"))
    return out


def _role(kind: str, items: Mapping[str, str]) -> Role | None:
    if "#inflight-req" in items or "#bootstrap-req" in items:
        return Role.PREFILL
    if "#transfer-req" in items or "pre-allocated usage" in items:
        return Role.DECODE
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
