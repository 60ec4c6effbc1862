"""The KV transfer between a prefill and a decode rank, and the PD queues that hold requests
around it (``disaggregation/prefill.py``, ``decode.py``).

A :class:`Transfer` is shared by the prefill and decode ranks of one request.  Either side may
*lose* it (the router forgot the request there, the side's process restarted, its client went
away and the side dropped it): the other side is then never told.  The side that lost it releases
its own share as a failed transfer; the other keeps waiting: the prefill's sender has no timeout
once it has sent (NIXL's in 0.5.4 - 0.5.9 has no ``abort`` either), the decode's receiver gives
up after ``SGLANG_DISAGGREGATION_WAITING_TIMEOUT`` (300 s by default).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from poolwatch_emulator.req import Req

__all__ = ["DecodePreallocQueue", "DecodeRequest", "DecodeTransferQueue", "PrefillBootstrapQueue", "Transfer"]


class Transfer:
    """One request's KV transfer, shared by the prefill and decode ranks that serve it."""

    def __init__(self, rid: str, latency: float):
        self.rid = rid
        self.latency = latency
        self.decode_ready = False
        self.prefill_done_at: float | None = None
        self.failed = False  # both sides see it fail (a crash, an abort through a working transport)
        self.decode_lost = False  # the decode side dropped it: the prefill's sender waits on
        self.prefill_lost = False  # the prefill side dropped it: the decode's receiver waits on

    def done(self, now: float) -> bool:
        lost = self.decode_lost or self.prefill_lost
        return not lost and self.prefill_done_at is not None and now >= self.prefill_done_at + self.latency

    def failed_for(self, side: str) -> bool:
        """Whether ``side`` ("prefill" or "decode") sees the transfer fail (it lost it itself)."""
        return self.failed or (self.prefill_lost if side == "prefill" else self.decode_lost)


@dataclass
class PrefillBootstrapQueue:
    queue: list[Req] = field(default_factory=list)

    def pop_bootstrapped(self) -> list[Req]:
        ready = [r for r in self.queue if r.transfer.decode_ready or r.transfer.failed_for("prefill")]
        if ready:
            gone = {id(r) for r in ready}
            self.queue = [r for r in self.queue if id(r) not in gone]
        return [r for r in ready if not r.transfer.failed_for("prefill")]


@dataclass
class DecodeRequest:
    req: Req
    waiting_for_input: bool = False
    emu_waiting_since: float = 0.0  # simulated time its KV was preallocated (the receiver's init)


@dataclass
class DecodePreallocQueue:
    queue: list[DecodeRequest] = field(default_factory=list)
    retracted_queue: list[Req] = field(default_factory=list)


@dataclass
class DecodeTransferQueue:
    queue: list[DecodeRequest] = field(default_factory=list)
