"""The wire form of what waits on a rank: its holds (:mod:`poolwatch.model.holds`) and its scheduler's
progress (:mod:`poolwatch.model.progress`).

Both travel under keys of their own (``holds``, ``progress``) that a snapshot from before them does
not have (then: no hold, no progress known) and an older sidecar does not read (it ignores keys it
does not know), so probes and sidecars of every version keep reading each other.  Owner names are
checked as text of at most :data:`~poolwatch.model.holds.MAX_OWNER` characters with no control
character: inert wherever they land.  Pure and stdlib-only (the probe imports the codec).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any, TypeVar

from poolwatch import fields
from poolwatch.fields import MAX_INT, FieldError
from poolwatch.inert import inert
from poolwatch.model.holds import MAX_HOLDERS, MAX_OWNER, Hold, Holder, HoldReason
from poolwatch.model.progress import MAX_VICTIMS, Progress
from poolwatch.model.rank import Pool

__all__ = [
    "MAX_HOLDS",
    "dump_holds",
    "dump_progress",
    "fast_progress",
    "parse_holds",
    "parse_progress",
]

MAX_HOLDS = 64  # holds one snapshot may list (pools x reasons: a handful)
T = TypeVar("T")


def dump_holds(holds: tuple[Hold, ...]) -> list[dict[str, Any]]:
    out = []
    for h in holds:
        d = asdict(h)
        d["pool"], d["reason"] = h.pool.value, h.reason.value
        d["named"] = [asdict(n) for n in h.named]
        out.append(d)
    return out


def dump_progress(p: Progress) -> dict[str, Any]:
    d = asdict(p)
    d["head"] = list(p.head)
    d["recent"] = [list(r) for r in p.recent]
    return d


def _owner(raw: object, where: str) -> str:
    """An owner's name as it enters: bounded, and inert whatever the sender did."""
    return inert(fields.text(raw, where, MAX_OWNER))


def _holder(raw: object, where: str) -> Holder:
    d = fields.mapping(raw, where)
    return Holder(
        owner=_owner(d.get("owner"), f"{where}.owner"),
        slots=fields.count(d.get("slots", 0), f"{where}.slots"),
        since=fields.number(d.get("since"), f"{where}.since"),
        aborted=fields.boolean(d.get("aborted", False), f"{where}.aborted"),
    )


def _hold(raw: object, where: str) -> Hold:
    d = fields.mapping(raw, where)
    timeout = d.get("timeout")
    return Hold(
        pool=fields.enumerated(Pool, d.get("pool"), f"{where}.pool"),
        reason=fields.enumerated(HoldReason, d.get("reason"), f"{where}.reason"),
        slots=fields.count(d.get("slots"), f"{where}.slots"),
        owners=fields.count(d.get("owners"), f"{where}.owners"),
        oldest=fields.number(d.get("oldest"), f"{where}.oldest"),
        timeout=None if timeout is None else _seconds(timeout, f"{where}.timeout"),
        named=fields.items(d.get("named", []), f"{where}.named", _holder, MAX_HOLDERS),
        source=fields.text(d.get("source", ""), f"{where}.source", fields.MAX_NAME),
    )


def _seconds(raw: object, where: str) -> float:
    value = fields.number(raw, where)
    if value < 0:
        raise FieldError(f"{where}: a duration is never negative, got {fields.shown(raw)}")
    return value


def parse_holds(raw: object, where: str = "holds") -> tuple[Hold, ...]:
    """A snapshot's ``holds`` (absent: none)."""
    return fields.items(raw, where, _hold, MAX_HOLDS)


def _victim(raw: object, where: str) -> tuple[float, str]:
    items: tuple[Any, ...] = fields.items(raw, where, lambda v, w: v, 2)
    if len(items) != 2:
        raise FieldError(f"{where}: expected [seconds, owner], got {fields.shown(raw)}")
    return fields.number(items[0], f"{where}[0]"), _owner(items[1], f"{where}[1]")


def parse_progress(raw: object, where: str = "progress") -> Progress:
    """A snapshot's ``progress`` (the caller leaves an absent one as ``None``)."""
    d = fields.mapping(raw, where)
    counts: dict[str, int] = {
        name: fields.count(d.get(name, 0), f"{where}.{name}")
        for name in ("admitted", "preempted", "fruitless", "waiting", "stalled_steps")
    }
    return Progress(
        **counts,
        stalled_since=fields.number(d.get("stalled_since", 0.0), f"{where}.stalled_since"),
        head=fields.items(d.get("head", []), f"{where}.head", _owner, MAX_VICTIMS),
        recent=fields.items(d.get("recent", []), f"{where}.recent", _victim, MAX_VICTIMS),
        preemptions_seen=fields.boolean(d.get("preemptions_seen", True), f"{where}.preemptions_seen"),
    )


_PROGRESS_COUNTS = ("admitted", "preempted", "fruitless", "waiting", "stalled_steps")
_PROGRESS_KEYS = frozenset((*_PROGRESS_COUNTS, "stalled_since", "head", "recent", "preemptions_seen"))


def fast_progress(raw: object) -> Progress | None:
    """``raw`` as progress when it has the common shape (plain counts, no head or victims listed),
    else ``None`` (the full parser then accepts it or names its first bad field)."""
    if type(raw) is not dict or not raw.keys() <= _PROGRESS_KEYS:
        return None
    g: Callable[[str, Any], Any] = raw.get
    counts = [g(name, 0) for name in _PROGRESS_COUNTS]
    since, seen = g("stalled_since", 0.0), g("preemptions_seen", True)
    if any(type(v) is not int or not 0 <= v <= MAX_INT for v in counts) or type(seen) is not bool:
        return None
    if type(since) not in (int, float) or not -fields.MAX_NUMBER <= since <= fields.MAX_NUMBER:
        return None
    if g("head", []) != [] or g("recent", []) != []:
        return None
    admitted, preempted, fruitless, waiting, stalled = counts
    return Progress(admitted, preempted, fruitless, waiting, stalled, float(since), preemptions_seen=seen)
