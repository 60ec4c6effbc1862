"""SGLang's batch statistics and startup lines, as figures.  Pure.

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
(:func:`batch_items_of`): a pool figure and a queue, marked ``damaged``; its kind comes from its
items (prefill items ``#new-seq``/``#new-token``, decode items ``#token``/``gen throughput``), else
``batch``.
"""

from __future__ import annotations

import re
from dataclasses import replace

from poolwatch.model.rank import Pool, Role
from poolwatch.sources.logfile.events import Figures, PoolSize
from poolwatch.sources.logfile.heads import Ranks
from poolwatch.sources.sglang.log.formats import BATCH_HEADS, ROLE_KEYS

__all__ = ["batch_items_of", "capacity_of", "parse_batch_line"]

_CAPACITY = (
    (
        re.compile(r"^(?:Rank \d{1,6}: )?max_total_num_tokens?=(\d+),"),
        Pool.FULL,
    ),  # 0.1.x: "Rank 0: ..._token="
    (re.compile(r"^Mamba Cache is allocated\. max_mamba_cache_size: (\d+)"), Pool.MAMBA),
)
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
_THROUGHPUT = ("gen throughput (token/s)", "input throughput (token/s)")
_PREALLOC = "#prealloc-req"
_PREFILL_ITEMS = frozenset({"#new-seq", "#new-token", "#cached-token"})
_DECODE_ITEMS = frozenset({"#token", "#full token", "#swa token", "mamba num", "gen throughput (token/s)"})
# "key: number" items, separated by ", " (0.2+) or ". " (0.1.x); ASCII digits only.
_HEAD_WORDS = ("Decode batch", "Prefill batch", "new fill batch")
_REMNANT = re.compile(r"(?P<words>[A-Za-z ]{0,14})(?: \[\d{1,12}\])?[.,]? ?")
_ITEM = re.compile(r"(?:^|, |\. )([#A-Za-z][\w #\-]*?): (-?[0-9]+(?:\.[0-9]+)?)(?=[,.%\s]|$)")


def capacity_of(message: str, at: float, ranks: Ranks) -> PoolSize | None:
    """A startup line naming a pool size; the full pool's starts a new boot of the server."""
    if "max_" in message or "Mamba Cache" in message:
        for pattern, pool in _CAPACITY:
            m = pattern.match(message)
            if m is not None:
                return PoolSize(at, ranks, pool, int(m[1]), boot=pool is Pool.FULL)
    return None


def parse_batch_line(
    message: str, at: float, ranks: Ranks | None, *, salvaged: bool = False
) -> Figures | None:
    """A batch statistics line of any release, or ``None`` when ``message`` is not one; one whose
    head is damaged is read by its items (``damaged``) when what stands before them is what is left
    of a batch head (``\ufffd\ufffdcode batch [1203], #running-req: 4, ...``) or the line's prefix
    was damaged too (``salvaged``): never a line that quotes a batch line after its own words (a
    request's ``rid`` or prompt, ``Abort queued request. req.rid='Decode batch, #running-req: 0'``)."""
    if "batch" in message:
        for head in BATCH_HEADS:
            m = head.match(message)
            if m is not None:
                kind = "decode" if m["kind"] == "Decode" else "prefill"
                iteration = int(m["iter"]) if m["iter"] else None
                return _batch(kind, iteration, _ITEM.findall(message[m.end() :]), at, ranks)
    items = batch_items_of(message)
    if not items or not (salvaged or _remnant(message)):
        return None
    keys = {key for key, _ in items}
    kind = "prefill" if keys & _PREFILL_ITEMS else "decode" if keys & _DECODE_ITEMS else "batch"
    return replace(_batch(kind, None, items, at, ranks), damaged=True)


def _remnant(message: str) -> bool:
    """What stands before the first item is what is left of a batch head: damaged bytes, then the
    end of ``Decode batch`` / ``Prefill batch`` / ``new fill batch`` (and its ``[iteration]``)."""
    first = _ITEM.search(message)
    if first is None:
        return False
    lead = "".join(c for c in message[: first.start(1)] if c.isascii() and c.isprintable())
    m = _REMNANT.fullmatch(lead)
    return m is not None and any(head.endswith(m["words"]) for head in _HEAD_WORDS)


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
    kind: str, iteration: int | None, items: list[tuple[str, str]], at: float, ranks: Ranks | None
) -> Figures:
    used: dict[Pool, int] = {}
    usage: dict[Pool, float] = {}
    queues: dict[str, int] = {}
    negative: set[Pool] = set()
    role: Role | None = None
    throughput: float | None = None
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
        elif key in _THROUGHPUT and throughput is None:
            throughput = float(value)
        if role is None and key in ROLE_KEYS:
            role = Role(ROLE_KEYS[key])
    return Figures(
        at,
        ranks,
        kind,
        used,
        usage,
        frozenset(negative),
        queues,
        throughput=throughput,
        role=role,
        iteration=iteration,
    )
