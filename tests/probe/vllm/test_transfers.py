"""Freed while a transfer is pending (rigs/fakes/vllm.py beside a connector): a finished
request kept for a send and a receive, freed when the first of them reports, is named at that free
with its blocks and its request (``freed_in_flight``, hook ``kv_transfer``); a request freed by its
only transfer, by both reported together, by the last of two, or by no report at all names nothing."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from poolwatch.model.findings import TripwireKind
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.lifecycle import attach
from poolwatch.probe.vllm.engine import VLLM, vllm_release
from poolwatch.probe.vllm.extras import VllmProbe
from rigs.fakes.vllm import Block, Scheduler

CONFIG = ProbeConfig(serve=False, sample_interval_s=0.01, directory="/nonexistent-poolwatch-transfers")


class SavingConnector:
    """Stands for a connector (only its presence and class name are read)."""


@dataclass
class KVConnectorOutput:
    finished_sending: set[str] = field(default_factory=set)
    finished_recving: set[str] = field(default_factory=set)


@dataclass
class RunnerOutput:
    kv_connector_output: KVConnectorOutput | None = None


class Kept(Scheduler):
    """vLLM's contract beside a connector: a finished request the connector saves (``saving``) is
    kept (``request_finished`` answered delay), and so is one aborted while its remote KV lands
    (``_aborted_kv_loads``); the first report of either frees it, as vLLM 0.34 does."""

    def __init__(self, saving: set[str]) -> None:
        super().__init__(64)
        self.connector = SavingConnector()
        self.saving = saving
        self._aborted_kv_loads: set[str] = set()

    def _connector_finished(self, request: Any) -> tuple[bool, None]:
        return request.request_id in self.saving, None

    def keep(self, rid: str, *, receiving: bool) -> None:
        req = self.requests[rid]
        req.finished = True
        self.running = [r for r in self.running if r is not req]
        delay = self._connector_finished(req)[0]
        if receiving:
            self._aborted_kv_loads.add(rid)
        elif not delay:
            self._free(rid)

    def _free(self, rid: str) -> None:
        for m in self.managers:
            m.free(rid)
        del self.requests[rid]

    def update_from_output(self, output: Any = None, runner: Any = None) -> None:  # type: ignore[override]
        kv = runner.kv_connector_output if runner is not None else None
        for rid in sorted(kv.finished_recving if kv else ()):
            self._aborted_kv_loads.discard(rid)
            self._free(rid)
        for rid in sorted(kv.finished_sending if kv else ()):
            assert rid in self.requests  # vLLM's own assert: a second report of a freed request
            self._free(rid)


def attached(sched: Scheduler, made: list[Scheduler]) -> VllmProbe:
    made.append(sched)
    probe = attach(VLLM, sched, CONFIG, release=vllm_release("0.34.0"))
    assert isinstance(probe, VllmProbe)
    return probe


def named(probe: VllmProbe) -> list[tuple[tuple[int, ...], tuple[str, ...], str]]:
    snap = probe.latest
    trips = snap.tripwires if snap else ()
    return [(t.slots, t.requests, t.first_seen_hook) for t in trips if t.kind is TripwireKind.FREED_IN_FLIGHT]


def report(sched: Kept, *, sent: set[str] = frozenset(), received: set[str] = frozenset()) -> None:  # type: ignore[assignment]
    sched.update_from_output(None, RunnerOutput(KVConnectorOutput(set(sent), set(received))))


def ids(blocks: list[Block]) -> tuple[int, ...]:
    return tuple(sorted(b.block_id for b in blocks))


def test_the_first_of_two_transfers_freeing_is_named_at_that_free(made: list[Scheduler]) -> None:
    sched = Kept(saving={"r"})
    probe = attached(sched, made)
    blocks = sched.add("r", 3)
    sched.keep("r", receiving=True)  # aborted while its remote KV lands, and saved on finish
    report(sched, received={"r"})  # the receive lands: vLLM frees, the save still reads the blocks
    assert named(probe) == [(ids(blocks), ("r",), "kv_transfer")]
    with pytest.raises(AssertionError):
        report(sched, sent={"r"})  # the engine's own signal, a step later


def test_a_send_before_the_receive_is_named_too(made: list[Scheduler]) -> None:
    sched = Kept(saving={"r"})
    probe = attached(sched, made)
    blocks = sched.add("r", 2)
    sched.keep("r", receiving=True)
    report(sched, sent={"r"})  # the save lands first: the remote KV still writes the blocks
    assert named(probe) == [(ids(blocks), ("r",), "kv_transfer")]


def test_one_transfer_both_together_the_last_of_two_or_no_report_name_nothing(made: list[Scheduler]) -> None:
    sched = Kept(saving={"p", "both", "late"})
    probe = attached(sched, made)
    for rid in ("p", "both", "late", "reclaimed"):
        sched.add(rid, 2)
    sched.keep("p", receiving=False)  # a prefill's KV awaiting the decode's read
    sched.keep("both", receiving=True)
    sched.keep("late", receiving=True)
    sched.keep("reclaimed", receiving=True)
    report(sched, sent={"p"})
    with pytest.raises(AssertionError):  # both together: vLLM's own assert; neither was early
        report(sched, sent={"both"}, received={"both"})
    sched.requests["late"].finished = True
    sched._aborted_kv_loads.discard("late")  # a control holding the receive back until the save lands
    report(sched, received=set())
    report(sched, sent={"late"})
    sched._aborted_kv_loads.discard("reclaimed")
    sched._free("reclaimed")  # the scheduler's own reclaim, outside any report
    assert named(probe) == []
    assert probe.transfers is not None
    assert probe.transfers.sending == set()  # nothing kept once vLLM let go of the requests
