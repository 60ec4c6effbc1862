"""What an SGLang log record says: batch statistics, pool capacities and incidents.  Pure.

Batch lines of every release (reference §5.3; the heads per family are in
:data:`~poolwatch.sources.sglang.log.formats.BATCH_HEADS`): ``Prefill batch. #new-seq: 1, ...``
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

A batch line whose head is damaged (``\ufffd\ufffdcode batch [1203], #running-req: 4, ...``: bytes
lost or garbled at the start of the line) is still read by its items when they say it is one
(:func:`batch_items_of`): a pool figure and a queue, marked ``damaged`` (counted and shown by
``poolwatch replay``, never dropped without a word); its kind comes from its items (prefill items
``#new-seq``/``#new-token``, decode items ``#token``/``gen throughput``), else ``batch``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from poolwatch.model.rank import IncidentKind, Pool, Role
from poolwatch.model.snapshot import Incident
from poolwatch.sources.sglang.log.formats import BATCH_HEADS, CRASH_MARKERS, ROLE_KEYS
from poolwatch.sources.sglang.log.leak_message import find_incidents, match_format
from poolwatch.sources.sglang.log.lines import Ranks, clean, parse_line
from poolwatch.sources.sglang.log.records import LogRecord

__all__ = [
    "BatchStats",
    "Capacity",
    "LogEvent",
    "RankIncident",
    "UnattributedIncident",
    "batch_items_of",
    "interpret",
    "parse_batch_line",
    "recognises",
]

_CAPACITY = (
    (
        re.compile(r"^(?:Rank \d{1,6}: )?max_total_num_tokens?=(\d+),"),
        Pool.FULL,
    ),  # 0.1.x: "Rank 0: ..._token="
    (re.compile(r"^Mamba Cache is allocated\. max_mamba_cache_size: (\d+)"), Pool.MAMBA),
)
_MAX_MESSAGE = 2000

# Every numeric item a batch line can carry, by key: a used count, a usage ratio, or a queue
# length (named as the probe names it).  "#prealloc-req" is the bootstrap queue on a prefill line
# and the pre-allocation queue on a decode line.
_USED = {"#token": Pool.FULL, "#full token": Pool.FULL, "#swa token": Pool.SWA, "mamba num": Pool.MAMBA}
_USAGE = {
    "token usage": Pool.FULL,
    "full token usage": Pool.FULL,
    "swa token usage": Pool.SWA,
    "mamba usage": Pool.MAMBA,
}
_QUEUES = {
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
_PREALLOC = "#prealloc-req"
_PREFILL_ITEMS = frozenset({"#new-seq", "#new-token", "#cached-token"})
_DECODE_ITEMS = frozenset({"#token", "#full token", "#swa token", "mamba num", "gen throughput (token/s)"})
# "key: number" items, separated by ", " (0.2+) or ". " (0.1.x); ASCII digits only.
_ITEM = re.compile(r"(?:^|, |\. )([#A-Za-z][\w #\-]*?): (-?[0-9]+(?:\.[0-9]+)?)(?=[,.%\s]|$)")


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
    damaged: bool = False  # its head (or its prefix) was garbled: read by its items alone


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


@dataclass(frozen=True, slots=True)
class UnattributedIncident:
    """An incident in an orphan block (its rank header lay before the excerpt): no rank is proven,
    so it is held apart instead of being folded into rank 0's snapshots."""

    incident: Incident


LogEvent = BatchStats | Capacity | RankIncident | UnattributedIncident


def interpret(record: LogRecord) -> list[LogEvent]:
    """The events of one record (most records are none of these and give ``[]``)."""
    if not record.attributed:
        found = find_incidents(record.lines, record.at)
        return [UnattributedIncident(i) for i in found]
    events: list[LogEvent] = []
    if record.headless:  # 0.1.x wrote no prefix at all: any line may be a batch or startup line
        events += [e for line in record.lines if (e := _line_event(line, record.at, record.ranks))]
    else:
        head = _line_event(record.message, record.at, record.ranks)
        if head is not None:
            if not record.continuation:
                return [head]  # a batch or startup line is one line: nothing else to look for
            events.append(head)  # lines after it belong to something else (an interleaved report)
    events += [RankIncident(record.ranks, i) for i in find_incidents(record.lines, record.at)]
    if any(marker in record.message for marker, _ in CRASH_MARKERS):
        text = "\n".join(record.lines)[:_MAX_MESSAGE]
        events.append(RankIncident(record.ranks, Incident(IncidentKind.SCHEDULER_EXCEPTION, text, record.at)))
    return events


def recognises(line: str) -> bool:
    """Whether one raw line is in a format SGLang writes: a batch or startup line, a leak report's
    marker or a crash marker (``poolwatch replay`` tells engines' logs apart by this)."""
    prefixed = parse_line(line)
    text = prefixed.message if prefixed is not None else clean(line).strip()
    if _line_event(text, 0.0, Ranks()) is not None or match_format(text) is not None:
        return True
    return any(marker in text for marker, _ in CRASH_MARKERS)


def _line_event(message: str, at: float, ranks: Ranks) -> BatchStats | Capacity | None:
    """The one-line event ``message`` is: a batch line or a startup line naming a pool size."""
    batch = parse_batch_line(message, at, ranks)
    if batch is not None:
        return batch
    if "max_" in message or "Mamba Cache" in message:
        for pattern, pool in _CAPACITY:
            m = pattern.match(message)
            if m is not None:
                return Capacity(at, ranks, pool, int(m[1]))
    return None


def parse_batch_line(message: str, at: float, ranks: Ranks) -> BatchStats | None:
    """A batch statistics line of any release, or ``None`` when ``message`` is not one; one whose
    head is damaged is read by its items (``damaged``)."""
    if "batch" in message:
        for head in BATCH_HEADS:
            m = head.match(message)
            if m is not None:
                kind = "decode" if m["kind"] == "Decode" else "prefill"
                iteration = int(m["iter"]) if m["iter"] else None
                return _batch(kind, iteration, _ITEM.findall(message[m.end() :]), at, ranks)
    items = batch_items_of(message)
    if not items:
        return None
    keys = {key for key, _ in items}
    kind = "prefill" if keys & _PREFILL_ITEMS else "decode" if keys & _DECODE_ITEMS else "batch"
    return replace(_batch(kind, None, items, at, ranks), damaged=True)


def batch_items_of(text: str) -> list[tuple[str, str]]:
    """The ``key: number`` items of ``text`` when they are a batch line's (a pool figure and a
    queue length among them), else ``[]``: what is left of a batch line whose head is damaged."""
    if "#running-req: " not in text and "#queue-req: " not in text:  # most lines: no regex
        return []
    items = _ITEM.findall(text)
    keys = {key for key, _ in items}
    pools = keys & (_USED.keys() | _USAGE.keys())
    return items if pools and keys & _QUEUES.keys() else []


def _batch(
    kind: str, iteration: int | None, items: list[tuple[str, str]], at: float, ranks: Ranks
) -> BatchStats:
    used: dict[Pool, int] = {}
    usage: dict[Pool, float] = {}
    queues: dict[str, int] = {}
    negative: set[Pool] = set()
    role: Role | None = None
    for key, value in items:
        if key in _USAGE:
            pool = _USAGE[key]
            usage.setdefault(pool, float(value))
            if value[0] == "-":
                negative.add(pool)
        elif key in _USED:
            used.setdefault(_USED[key], int(value))
        elif key in _QUEUES:
            queues.setdefault(_QUEUES[key], int(value))
        elif key == _PREALLOC:
            queues.setdefault("bootstrap" if kind == "prefill" else "prealloc", int(value))
        if role is None and key in ROLE_KEYS:
            role = Role(ROLE_KEYS[key])
    return BatchStats(at, ranks, kind, iteration, used, usage, frozenset(negative), queues, role)
