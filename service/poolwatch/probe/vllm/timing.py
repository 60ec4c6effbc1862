"""The checks of a free wrong only in time, armed on a vLLM scheduler where its hazard exists
(EngineCore thread): which ones a scheduler needs, the step wrappers they share, and taking them
off again.

* the steps in flight (:mod:`~poolwatch.probe.vllm.in_flight`): beside a KV consumer connector
  (its blocks freed while a step lists them), or with speculative decoding and a windowed manager
  (:mod:`~poolwatch.probe.vllm.rollback`: its drops checked against a rollback of the drafts);
* the pending transfers of finished requests (:mod:`~poolwatch.probe.vllm.transfers`): beside any
  KV connector.

``schedule`` is wrapped only for the steps in flight, ``update_from_output`` for either (one
wrapper telling both).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from poolwatch.probe.vllm.in_flight import InFlight, unordered_writer
from poolwatch.probe.vllm.rollback import Named, speculative, windowed, wrap_drops
from poolwatch.probe.vllm.transfers import Transfers
from poolwatch.probe.vllm.wrapping import Restore, restore, unwrap, wrap_steps

__all__ = ["Timing", "arm"]


@dataclass
class Timing:
    """What :func:`arm` put on one scheduler."""

    in_flight: InFlight | None = None
    transfers: Transfers | None = None
    steps: tuple[Restore, ...] = ()
    wrapped: list[tuple[object, str]] = field(default_factory=list)

    def applying(self, output: Any, runner_output: Any = None) -> None:
        """Before ``update_from_output(output, runner_output)``."""
        if self.in_flight is not None:
            self.in_flight.applying(output)
        if self.transfers is not None:
            self.transfers.applying(runner_output)

    def disarm(self) -> None:
        restore(self.steps)
        unwrap(self.wrapped)
        if self.transfers is not None:
            self.transfers.unwrap()
        self.in_flight, self.transfers, self.steps, self.wrapped = None, None, (), []


def arm(
    scheduler: Any, managers: tuple[Any, ...], receiving: Callable[[], Collection[str]], dropped: Named
) -> Timing:
    """The checks ``scheduler`` needs, wrapped on it; ``receiving``: the finished requests the probe
    saw waiting for remote KV; ``dropped``: told a window's drop a rollback still needs."""
    writer = unordered_writer(scheduler)
    windows = windowed(managers) if speculative(scheduler) else []
    timing = Timing()
    if writer is not None or windows:
        timing.in_flight = InFlight(writer)
    if getattr(scheduler, "connector", None) is not None:
        timing.transfers = Transfers(scheduler, receiving)
        timing.transfers.wrap()
    flight = timing.in_flight
    if flight is not None or timing.transfers is not None:
        scheduled = flight.scheduled if flight is not None else None
        timing.steps = tuple(wrap_steps(scheduler, scheduled, timing.applying))
    if flight is not None:
        timing.wrapped = wrap_drops(scheduler, windows, flight, dropped)
    return timing
