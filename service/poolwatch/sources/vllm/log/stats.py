"""vLLM's periodic statistics line, of every family S1 - S6, as figures.  Pure.

For example (0.32.0 on CPU, an S6 line without its optional parts)::

    Engine 000: Avg prompt throughput: 113.8 tokens/s, Avg generation throughput: 17.7 tokens/s,
    Running: 8 reqs, Waiting: 0 reqs, CPU KV cache usage: 0.1%, Prefix cache hit rate: 83.8%

The usage is printed with one decimal (``%.1f%%``), so it gives no block count; only a leading
``-`` is certain: ``-0.0%`` is a free queue that counts more blocks than the pool has, a surplus
of at least one block.  ``Preemptions`` is the number of requests preempted during the interval.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from poolwatch.sources.vllm.log.formats import STATS_HEAD

__all__ = ["StatsFigures", "parse_stats_line"]

# "key: number" parts, after ", " or the head; the unit ("%", " reqs", " tokens/s") follows.
_PART = re.compile(r"(?:^|, )([A-Z][A-Za-z ]{0,40}?|Iteration\(\d{1,12}\)): (-?[0-9]{1,12}(?:\.[0-9]{1,6})?)")
_USAGE = re.compile(r"[A-Z]{2,8} KV cache usage")
_THROUGHPUTS = frozenset({"Avg prompt throughput", "Avg generation throughput"})
_COUNTS = {"Running": "running", "Waiting": "waiting", "Deferred": "deferred", "Preemptions": "preemptions"}


@dataclass(frozen=True, slots=True)
class StatsFigures:
    """What one statistics line says (``None``: the part is not on the line)."""

    engine: int | None  # the engine index; None for the "N Engines Aggregated" line
    usage: float | None = None  # KV cache usage, percent as printed (one decimal)
    negative: bool = False  # the usage was printed with a leading "-"
    device: str = ""  # "GPU", "CPU", ... (0.30+; "GPU" before)
    running: int | None = None
    waiting: int | None = None  # from 0.20 including the deferred
    deferred: int | None = None
    preemptions: int | None = None  # during the interval
    prefix_hit_rate: float | None = None  # percent
    throughput: float | None = None  # prompt + generation tokens/s over the interval (None: not printed)


def parse_stats_line(message: str) -> StatsFigures | None:
    """A statistics line of any release, or ``None`` when ``message`` is not one."""
    head = STATS_HEAD.match(message)
    if head is None or "KV cache usage: " not in message:
        return None
    engine = int(head["engine"]) if head["engine"] is not None else None
    counts: dict[str, int] = {}
    usage: tuple[str, str] | None = None
    hit_rate: float | None = None
    throughput: float | None = None
    for key, value in _PART.findall(message[head.end() :]):
        if key in _COUNTS and "." not in value:
            counts.setdefault(_COUNTS[key], int(value))
        elif key in _THROUGHPUTS:
            throughput = (throughput or 0.0) + float(value)
        elif usage is None and _USAGE.fullmatch(key):
            usage = (key.partition(" ")[0], value)
        elif key == "Prefix cache hit rate":
            hit_rate = float(value)
    if usage is None:
        return None
    device, printed = usage
    return StatsFigures(
        engine,
        usage=float(printed),
        negative=printed.startswith("-"),
        device=device,
        running=counts.get("running"),
        waiting=counts.get("waiting"),
        deferred=counts.get("deferred"),
        preemptions=counts.get("preemptions"),
        prefix_hit_rate=hit_rate,
        throughput=throughput,
    )
