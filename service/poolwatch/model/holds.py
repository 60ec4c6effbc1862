"""Capacity held by owners that do not progress by themselves: what the probe saw waiting, and since
when (no figures of a pool's balance: those are :mod:`poolwatch.model.rank`'s).

Some owners keep slots legitimately while they wait for something outside the scheduler's step: a
finished request whose KV a connector is still sending (vLLM's ``delay_free``, SGLang's prefill
inflight queue), a request waiting for remote KV (vLLM's ``WAITING_FOR_REMOTE_KVS``, SGLang's decode
transfer queue), a prefix-tree lock awaiting a host copy (SGLang HiCache's write-through and load-back).
The books balance while they wait, so the conservation gap never sees them; when what they wait for
never comes (a dead prefill, a dropped completion, an engine that stopped stepping) the capacity is
stranded.  The probe reports each kind per pool as a :class:`Hold`: how many slots, how many owners,
since when the oldest has waited, the engine's own timeout for that wait where it has one, and the
oldest few owners by name.

Owners are request ids or tree nodes.  A request id is whatever the client sent, so the probe keeps
only an *inert* form of it (:func:`owner_name`: bounded, control characters shown as signs) and it is never a
metric label.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from poolwatch.inert import inert
from poolwatch.model.rank import Pool

__all__ = ["MAX_HOLDERS", "MAX_OWNER", "Hold", "HoldReason", "Holder", "owner_name"]

MAX_OWNER = 64  # characters of an owner's name kept (a request id may be anything a client sent)
MAX_HOLDERS = 8  # owners named per hold, oldest first (the count is always complete)


class HoldReason(enum.StrEnum):
    """What the owners of a hold wait for."""

    KV_SEND = "kv_send"  # finished; kept until a connector or the PD sender reports its KV sent
    KV_RECV = "kv_recv"  # waiting for remote KV to land (PD decode); an aborted one keeps waiting too
    TREE_LOCK = "tree_lock"  # a prefix-tree lock awaiting a host copy's acknowledgement (HiCache)


@dataclass(frozen=True, slots=True)
class Holder:
    """One owner of a hold."""

    owner: str  # an inert request id, or ``node <id>``
    slots: int  # what it lists (shared slots count for each owner that lists them)
    since: float  # unix seconds: when the probe first saw it waiting this way
    aborted: bool = False  # finished by an abort while it waited (it waits on anyway)


@dataclass(frozen=True, slots=True)
class Hold:
    """The owners of one pool waiting for one thing, at one sample."""

    pool: Pool
    reason: HoldReason
    slots: int  # distinct slots held by these owners (beyond what live owners hold, where known)
    owners: int
    oldest: float  # unix seconds: since when the oldest owner has waited
    timeout: float | None = None  # the engine's own bound on this wait, seconds (None: it has none)
    named: tuple[Holder, ...] = ()  # the oldest owners, oldest first (at most MAX_HOLDERS)
    source: str = ""  # where ``timeout`` was read ("kv_lease_duration", "VLLM_NIXL_ABORT_REQUEST_TIMEOUT"...)

    def age(self, at: float) -> float:
        """Seconds the oldest owner has waited at ``at`` (the snapshot's ``taken_at``)."""
        return max(0.0, at - self.oldest)

    def stranded(self, at: float, bound: float) -> int:
        """The slots of owners that have waited more than ``bound`` seconds at ``at``: exact while
        fewer than the named (the oldest) are past it; every slot of the hold once all the named
        are (the owners beyond them are not told apart, and the hold pages anyway)."""
        if at - self.oldest <= bound:
            return 0
        late = [n.slots for n in self.named if at - n.since > bound]
        if not self.named or (len(late) == len(self.named) and self.owners > len(self.named)):
            return self.slots
        return min(self.slots, sum(late))


def owner_name(raw: object, limit: int = MAX_OWNER) -> str:
    """``raw`` as an owner's name: text made inert (:func:`poolwatch.inert.inert`: every control or
    invisible format character a visible sign, one for one), at most ``limit`` characters (a longer
    one ends in ``...``)."""
    text = raw if isinstance(raw, str) else str(raw)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (no text on the wire can hold one): U+FFFD
        text = "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)
    return inert(text)
