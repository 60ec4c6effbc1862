"""The last word waits, bounded (issue 23): a rank whose strict idle check is about to raise holds
until the sidecar was handed its final snapshot (plus a grace for the Alertmanager post), never
longer than ``POOLWATCH_PROBE_LAST_WORD_WAIT``, and never when no one collects.  Fake clock only."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tests.helpers import FakeWait

from poolwatch.model.snapshot import Snapshot
from poolwatch.probe.core.config import ProbeConfig, ProbeConfigError
from poolwatch.probe.core.last_word import ATTENDED_S, GRACE_S, Outcome, await_collection
from poolwatch.probe.core.publication import Publication
from poolwatch.probe.endpoint.messages import Request
from poolwatch.probe.endpoint.routes import Context, answer
from rigs.fakes.clock import FakeClock


def _attended(pub: Publication, snap: Snapshot) -> None:
    pub.publish(snap)
    pub.served(snap)  # the sidecar collected the previous snapshot


def _handed_over_in_one_wait(clock: FakeClock, seed: Snapshot) -> tuple[Publication, Snapshot]:
    """A publication whose collector took ``seed``, and that hands the final snapshot it now
    publishes over during the first (0.01 s) wait."""
    final = replace(seed, seq=seed.seq + 1, final=True)
    pub: Publication
    pub = Publication(clock=clock, wait=FakeWait(clock, step=0.01, during=lambda: pub.served(final)))
    _attended(pub, seed)
    pub.publish(final)
    return pub, final


def test_the_wait_ends_when_the_sidecar_is_handed_the_final_snapshot_then_the_grace(
    seed_snapshot: Snapshot,
) -> None:
    clock = FakeClock(100.0)
    pub, final = _handed_over_in_one_wait(clock, seed_snapshot)
    slept: list[float] = []
    outcome = await_collection(pub, final.seq, 0.3, clock=clock, sleep=slept.append)
    assert outcome is Outcome.COLLECTED
    assert clock.now == pytest.approx(100.01)  # one fake wait: the hand-over ended it, not the bound
    assert slept == [GRACE_S]


def test_an_older_snapshot_handed_over_does_not_end_the_wait(seed_snapshot: Snapshot) -> None:
    clock = FakeClock(100.0)
    final = replace(seed_snapshot, seq=seed_snapshot.seq + 1, final=True)
    pub: Publication
    pub = Publication(clock=clock, wait=FakeWait(clock, step=0.1, during=lambda: pub.served(seed_snapshot)))
    _attended(pub, seed_snapshot)
    slept: list[float] = []
    assert await_collection(pub, final.seq, 0.3, clock=clock, sleep=slept.append) is Outcome.TIMED_OUT
    assert clock.now == pytest.approx(100.3)  # the bound, in fake seconds
    assert slept == []


def test_the_wait_times_out_at_the_bound_when_the_sidecar_never_collects(seed_snapshot: Snapshot) -> None:
    clock = FakeClock(100.0)
    wait = FakeWait(clock, step=0.2)
    pub = Publication(clock=clock, wait=wait)
    _attended(pub, seed_snapshot)
    outcome = await_collection(pub, seed_snapshot.seq + 1, 0.5, clock=clock, sleep=lambda s: None)
    assert outcome is Outcome.TIMED_OUT
    assert clock.now == pytest.approx(100.5)
    assert wait.calls == pytest.approx([0.5, 0.3, 0.1])


def test_the_grace_never_passes_the_bound(seed_snapshot: Snapshot) -> None:
    clock = FakeClock(100.0)
    final = replace(seed_snapshot, seq=seed_snapshot.seq + 1)
    pub: Publication
    pub = Publication(clock=clock, wait=FakeWait(clock, step=0.28, during=lambda: pub.served(final)))
    _attended(pub, seed_snapshot)
    slept: list[float] = []
    assert await_collection(pub, final.seq, 0.3, clock=clock, sleep=slept.append) is Outcome.COLLECTED
    assert slept == pytest.approx([0.02])


def test_no_wait_when_no_one_collects(seed_snapshot: Snapshot) -> None:
    clock = FakeClock(100.0)
    wait = FakeWait(clock, step=0.1)
    pub = Publication(clock=clock, wait=wait)
    pub.publish(seed_snapshot)  # published, never served, no long-poll blocked
    assert (
        await_collection(pub, seed_snapshot.seq, 0.3, clock=clock, sleep=lambda s: None) is Outcome.UNATTENDED
    )
    pub.served(seed_snapshot)
    clock.advance(ATTENDED_S + 1)  # a sidecar that stopped collecting long ago
    assert await_collection(pub, seed_snapshot.seq + 1, 0.3, clock=clock) is Outcome.UNATTENDED
    assert wait.calls == []
    assert clock.now == 100.0 + ATTENDED_S + 1


def test_no_wait_when_serving_nothing_or_the_bound_is_zero(seed_snapshot: Snapshot) -> None:
    clock = FakeClock(100.0)
    wait = FakeWait(clock, step=0.1)
    pub = Publication(clock=clock, wait=wait)
    _attended(pub, seed_snapshot)
    assert await_collection(None, 5, 0.3, clock=clock) is Outcome.OFF
    assert await_collection(pub, seed_snapshot.seq + 1, 0.0, clock=clock) is Outcome.OFF
    assert wait.calls == []
    assert clock.now == 100.0


def test_a_closed_endpoint_ends_the_wait_at_once(seed_snapshot: Snapshot) -> None:
    clock = FakeClock(100.0)
    wait = FakeWait(clock, step=0.1)
    pub = Publication(clock=clock, wait=wait)
    _attended(pub, seed_snapshot)
    pub.close()  # the server stopped: nothing will be handed over
    assert await_collection(pub, seed_snapshot.seq + 1, 0.3, clock=clock) is Outcome.TIMED_OUT
    assert wait.calls == []


def test_the_endpoint_marks_what_it_hands_over(seed_snapshot: Snapshot) -> None:
    pub = Publication()
    pub.publish(seed_snapshot)
    ctx = Context(probe=None, publication=pub, port=9000, secret=None)  # type: ignore[arg-type]
    assert not pub.attended(ATTENDED_S)
    req = Request("GET", "/v1/snapshot", "", {"host": "127.0.0.1:9000"}, True, "127.0.0.1")
    assert answer(req, ctx).status == 200
    assert pub.attended(ATTENDED_S)
    assert pub.wait_served(seed_snapshot.seq, 0.0)  # handed over: no wait at all
    assert not pub.wait_served(seed_snapshot.seq + 1, 0.0)


@pytest.mark.parametrize(("raw", "value"), [(None, 0.3), ("0", 0.0), ("1.5", 1.5), ("", 0.3)])
def test_the_bound_setting(raw: str | None, value: float) -> None:
    env = {} if raw is None else {"POOLWATCH_PROBE_LAST_WORD_WAIT": raw}
    assert ProbeConfig.from_env(env).last_word_wait_s == value


@pytest.mark.parametrize("raw", ["-0.1", "6", "nan", "inf", "soon"])
def test_a_bad_bound_is_refused_by_name(raw: str) -> None:
    with pytest.raises(ProbeConfigError, match="POOLWATCH_PROBE_LAST_WORD_WAIT"):
        ProbeConfig.from_env({"POOLWATCH_PROBE_LAST_WORD_WAIT": raw})


def test_a_republication_of_the_same_seq_is_collected_only_once_that_copy_was_handed_over(
    seed_snapshot: Snapshot,
) -> None:
    """vLLM's free-time finding republishes the step's snapshot (same seq) with its tripwire: the
    copy handed over before it does not count, the one published at ``version`` does."""
    clock = FakeClock(100.0)
    pub = Publication(clock=clock, wait=FakeWait(clock, step=0.1))
    _attended(pub, seed_snapshot)  # the sidecar has the step's snapshot
    found = replace(seed_snapshot, final=True)
    pub.publish(found)
    version = pub.version
    assert not pub.wait_served(seed_snapshot.seq, 0.0, version)
    pub.served(seed_snapshot)  # a stale copy handed over again: still not the proof
    assert not pub.wait_served(seed_snapshot.seq, 0.0, version)
    pub.served(found)
    assert pub.wait_served(seed_snapshot.seq, 0.0, version)
    assert pub.wait_served(seed_snapshot.seq, 0.0)  # by seq alone, as before


def test_the_grace_is_configurable() -> None:
    """A loaded host's page path is slower than the default grace: ``POOLWATCH_PROBE_LAST_WORD_GRACE``
    lengthens it (within ``POOLWATCH_PROBE_LAST_WORD_WAIT``'s bound)."""
    env = {"POOLWATCH_PROBE_LAST_WORD_WAIT": "1", "POOLWATCH_PROBE_LAST_WORD_GRACE": "0.7"}
    config = ProbeConfig.from_env(env)
    assert (config.last_word_wait_s, config.last_word_grace_s) == (1.0, 0.7)
    assert ProbeConfig.from_env({}).last_word_grace_s == GRACE_S
    with pytest.raises(ProbeConfigError, match="POOLWATCH_PROBE_LAST_WORD_GRACE"):
        ProbeConfig.from_env({"POOLWATCH_PROBE_LAST_WORD_GRACE": "-1"})


@pytest.mark.parametrize(("bound", "grace", "slept_for"), [(1.0, 0.7, 0.7), (0.5, 0.7, 0.49)])
def test_the_configured_grace_follows_the_hand_over_and_the_bound_caps_it(
    seed_snapshot: Snapshot, bound: float, grace: float, slept_for: float
) -> None:
    clock = FakeClock(100.0)
    pub, final = _handed_over_in_one_wait(clock, seed_snapshot)
    slept: list[float] = []
    outcome = await_collection(pub, final.seq, bound, grace=grace, clock=clock, sleep=slept.append)
    assert outcome is Outcome.COLLECTED
    assert slept == [pytest.approx(slept_for)]  # the grace, or what the bound leaves of it
