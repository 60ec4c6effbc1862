"""Freed while a transfer is pending: a finished request's blocks returned while a KV transfer it
still waits for reads or writes them (EngineCore thread; nothing of vLLM's is written).

A finished request is kept with its blocks while a connector transfers its KV: a *send* (the
connector answered ``delay_free`` at ``request_finished``: a prefill's KV awaiting the decode's
read, an offload or store still saving) or a *receive* (aborted while ``WAITING_FOR_REMOTE_KVS``: the
remote KV still landing, 0.34's ``_aborted_kv_loads``).  vLLM frees the blocks when the worker
reports one of them finished (``finished_sending`` / ``finished_recving``), and records only one:
a request kept for both is freed at the first report while the other transfer still uses its
blocks -- a block handed to the next request is overwritten by the late read or its KV sent wrong
-- and the second report trips ``assert req_id in self.requests`` a step on (vLLM #46240, open).

So, with a connector: the requests its ``request_finished`` kept for a send (``_connector_finished``
wrapped on the instance), the reports of the output being applied (``update_from_output``, before),
and at a pop of a finished request's list: a send or a receive still pending -- not reported in
any output so far -- names its blocks with the request (``freed_in_flight``, hook ``kv_transfer``).  A
request freed by its only transfer's report, or by no report at all (a connector's own expiry, the
scheduler reclaiming it), names nothing.  Cost: a set update per finished request, one attribute
read per applied output, two set look-ups per pop.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Collection, Iterable
from typing import Any

__all__ = ["Transfers"]

log = logging.getLogger("poolwatch.probe")
_MAX_KEPT = 1 << 16  # requests remembered as sending at most


def _ids(found: Iterable[Any] | None) -> frozenset[str]:
    return frozenset(str(r) for r in (found or ()))


class Transfers:
    """One scheduler's pending transfers of finished requests, and the reports being applied."""

    def __init__(self, scheduler: Any, receiving: Callable[[], Collection[str]]) -> None:
        self.sched = scheduler
        self.receiving = receiving  # finished requests the probe saw waiting for remote KV
        self.sending: set[str] = set()
        self.sent: frozenset[str] = frozenset()  # reported in the output being applied
        self.received: frozenset[str] = frozenset()
        self.sent_before: set[str] = set()  # reported so far, for requests vLLM still keeps
        self.received_before: set[str] = set()
        self._wrapped: tuple[object, str] | None = None

    def wrap(self) -> None:
        """Wrap the instance's ``_connector_finished`` (where it has one) to learn the delayed sends."""
        original = getattr(self.sched, "_connector_finished", None)
        if callable(original) and "_connector_finished" not in vars(self.sched):
            self.sched._connector_finished = self._finished(original)
            self._wrapped = (self.sched, "_connector_finished")

    def unwrap(self) -> None:
        if self._wrapped is not None and "_connector_finished" in vars(self.sched):
            delattr(self.sched, "_connector_finished")
        self._wrapped = None

    def _finished(self, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def _connector_finished(request: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(request, *args, **kwargs)
            try:
                if result[0] and len(self.sending) < _MAX_KEPT:
                    self.sending.add(str(request.request_id))
            except Exception:
                log.debug("poolwatch transfer look failed", exc_info=True)
            return result

        return _connector_finished

    def applying(self, output: Any) -> None:
        """Before ``update_from_output``: the transfers the model runner's ``output`` reports finished."""
        kv = getattr(output, "kv_connector_output", None)
        self.sent = _ids(getattr(kv, "finished_sending", None))
        self.received = _ids(getattr(kv, "finished_recving", None))
        self.sent_before |= self.sent
        self.received_before |= self.received

    def applied(self) -> None:
        """After the update: its reports are spent; requests vLLM no longer keeps are forgotten."""
        self.sent = self.received = frozenset()
        requests = self.sched.requests
        for kept in (self.sending, self.sent_before, self.received_before):
            if kept:
                kept.intersection_update([r for r in kept if r in requests])

    def pending(self, request_id: str) -> tuple[str, ...]:
        """At a pop of ``request_id``'s list while a report is applied: the transfers the finished
        request still waits for (empty: none)."""
        if not self.sent and not self.received:  # no report being applied: not a transfer's free
            return ()
        rid = str(request_id)
        request = self.sched.requests.get(request_id)
        if request is None or not _finished(request):
            return ()
        out = []
        if rid in self.sending and rid not in self.sent_before:
            out.append("send")
        if rid not in self.received_before and (
            rid in getattr(self.sched, "_aborted_kv_loads", ()) or rid in self.receiving()
        ):
            out.append("receive")
        return tuple(out)


def _finished(request: Any) -> bool:
    try:
        return request.is_finished() is True
    except Exception:
        return False
