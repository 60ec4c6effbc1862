"""Undelivered notices survive a sidecar restart, per receiver, and the state file is the sidecar's own.

* A ``resolved`` that fell while a webhook was down is still owed after a restart and delivered
  when the webhook returns (before: lost, and the webhook's incident stayed open for ever).
* A firing alert a receiver never acknowledged is still owed (the detector restores it).
* A write killed half-way leaves a temporary file; the next start removes it (ours only).
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import httpx
from tests.detect.sidecar import seeded, settings
from tests.notify.fakes import FakeAlertmanager

from poolwatch.model.rank import Pool
from poolwatch.model.snapshot import Snapshot
from poolwatch.settings.sidecar import Settings
from poolwatch.sidecar.alerting import AlertWiring, build_alerting
from poolwatch.sidecar.persist import load_state
from poolwatch.sidecar.store import SnapshotStore
from rigs.fakes.clock import FakeClock

HOOK = "https://hooks.example/services/T0/B0/XXXX"


def balanced(seed: Snapshot, seq: int, at: float) -> Snapshot:
    mamba = replace(seed.pools[Pool.MAMBA], available=472)  # 476 = 472 + 4 evictable
    return replace(seed, seq=seq, taken_at=at, pools={**seed.pools, Pool.MAMBA: mamba})


def config(tmp_path: Path) -> Settings:
    return settings(tmp_path, webhook_urls=(HOOK,), alertmanager_urls=(), resolve_samples=1, resolve_hold=1.0)


async def deliver(alerting: AlertWiring) -> list[int]:
    return [await d.deliver_once() for d in alerting._deliverers]


async def paged_then_resolved(
    tmp_path: Path, clock: FakeClock, seed_snapshot: Snapshot, hook: FakeAlertmanager, *, down: bool
) -> int:
    """A sidecar pages the seed's double free to ``hook``, then the pool balances again (the
    webhook gone ``down`` by then, or not) and the sidecar stops; returns what the resolved's
    delivery attempt sent."""
    store, seed = seeded(clock, seed_snapshot)
    alerting = build_alerting(config(tmp_path), store, clock, transport=httpx.MockTransport(hook))
    await alerting.start()
    try:
        store.put(seed)
        alerting.evaluate()
        assert await deliver(alerting) == [1]  # the page
        hook.status = 503 if down else 200
        for seq in (1, 2, 3):
            clock.advance(2)
            store.put(balanced(seed_snapshot, seed.seq + seq, clock.now))
            alerting.evaluate()
        (sent,) = await deliver(alerting)
        alerting.evaluate()
        return sent
    finally:
        await alerting.stop()


async def restarted(tmp_path: Path, clock: FakeClock, hook: FakeAlertmanager) -> list[int]:
    """The sidecar started again (its state file only): what its first delivery sent."""
    again = build_alerting(config(tmp_path), SnapshotStore(), clock, transport=httpx.MockTransport(hook))
    await again.start()
    try:
        sent = await deliver(again)
        again.evaluate()
        return sent
    finally:
        await again.stop()


async def test_a_resolved_that_fell_while_the_webhook_was_down_is_delivered_after_a_restart(
    tmp_path: Path, clock: FakeClock, seed_snapshot: Snapshot
) -> None:
    hook = FakeAlertmanager()
    assert await paged_then_resolved(tmp_path, clock, seed_snapshot, hook, down=True) == 0
    owed = load_state(tmp_path / "alerts.json").undelivered["webhook:hooks.example"]
    assert [a.name for a in owed] == ["PoolwatchDoubleFree"]
    hook.status, before = 200, len(hook.bodies)  # the webhook is back; the sidecar restarted before it was
    clock.advance(120)
    assert await restarted(tmp_path, clock, hook) == [1]
    assert [(b["status"], b["alerts"][0]["labels"]["alertname"]) for b in hook.bodies[before:]] == [
        ("resolved", "PoolwatchDoubleFree")  # before the fix: nothing, the incident stayed open
    ]
    assert load_state(tmp_path / "alerts.json").undelivered == {}  # delivered: no longer owed


async def test_a_resolved_delivered_before_the_restart_is_not_sent_again(
    tmp_path: Path, clock: FakeClock, seed_snapshot: Snapshot
) -> None:
    hook = FakeAlertmanager()
    assert await paged_then_resolved(tmp_path, clock, seed_snapshot, hook, down=False) == 1
    assert await restarted(tmp_path, clock, hook) == [0]
    assert [b["status"] for b in hook.bodies] == ["firing", "resolved"]


async def test_a_killed_writes_temporary_file_is_removed_at_the_next_start_and_no_other(
    tmp_path: Path, clock: FakeClock
) -> None:
    stale = [tmp_path / ".alerts.json.0123456789ab.tmp", tmp_path / ".alerts.json.k3x_9q2z"]
    kept = [
        tmp_path / ".alerts.json.notours",
        tmp_path / "other.tmp",
        tmp_path / ".other.json.0123456789ab.tmp",
    ]
    for path in (*stale, *kept):
        path.write_text("{")
    build_alerting(config(tmp_path), SnapshotStore(), clock)
    assert [p.exists() for p in stale] == [False, False]
    assert [p.exists() for p in kept] == [True, True, True]


async def test_the_state_file_is_written_mode_0600_in_a_directory_of_its_own(
    tmp_path: Path, clock: FakeClock, seed_snapshot: Snapshot
) -> None:
    path = tmp_path / "state" / "alerts.json"
    configured = settings(tmp_path, state_file=str(path))
    store, seed = seeded(clock, seed_snapshot)
    alerting = build_alerting(configured, store, clock)
    store.put(seed)
    alerting.evaluate()
    assert (os.stat(path).st_mode & 0o777, os.stat(path.parent).st_mode & 0o077) == (0o600, 0)
    assert [a.name for a in load_state(path).alerts] == ["PoolwatchDoubleFree"]
