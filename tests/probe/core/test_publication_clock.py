"""A long-poll on the probe's publication, driven by a fake clock: the deadline is kept and an
early answer comes with the change, and no test waits on the wall clock."""

from __future__ import annotations

from dataclasses import replace

from tests.helpers import FakeWait

from poolwatch.conservation import signature
from poolwatch.model.snapshot import Snapshot
from poolwatch.probe.core.publication import Publication
from rigs.fakes.clock import FakeClock


def test_an_unchanged_signature_is_answered_when_the_deadline_passes_on_the_fake_clock(
    seed_snapshot: Snapshot,
) -> None:
    clock = FakeClock(100.0)
    wait = FakeWait(clock, step=4.0)
    pub = Publication(clock=clock, wait=wait)
    pub.publish(seed_snapshot)
    assert pub.wait_changed(signature(seed_snapshot), 10.0) is seed_snapshot
    assert clock.now == 110.0  # 4 + 4 + 2: it waited exactly its deadline, in fake seconds
    assert wait.calls == [10.0, 6.0, 2.0]


def test_a_publish_during_the_wait_answers_at_once_with_the_new_snapshot(seed_snapshot: Snapshot) -> None:
    clock = FakeClock(100.0)
    fixed = replace(seed_snapshot, seq=seed_snapshot.seq + 1, pools={})
    pub: Publication
    pub = Publication(clock=clock, wait=FakeWait(clock, step=1.0, during=lambda: pub.publish(fixed)))
    pub.publish(seed_snapshot)
    assert pub.wait_changed(signature(seed_snapshot), 30.0) is fixed
    assert clock.now == 101.0  # one fake second, not thirty


def test_a_publish_with_the_same_signature_keeps_the_long_poll_waiting(seed_snapshot: Snapshot) -> None:
    clock = FakeClock(100.0)
    same = replace(seed_snapshot, taken_at=seed_snapshot.taken_at + 1)  # same balances: no news
    pub: Publication
    wait = FakeWait(clock, step=5.0, during=lambda: pub.publish(same))
    pub = Publication(clock=clock, wait=wait)
    pub.publish(seed_snapshot)
    assert pub.wait_changed(signature(seed_snapshot), 12.0) is same
    assert clock.now == 112.0
    assert len(wait.calls) == 3
