"""What the sidecar writes at a real incident it can always read back at its next start.

The break (issue 42): twelve tripwires of a recurring double free made a 6,656-character alert
description; the sidecar saved it, and at the next start refused the whole state file for a text
over its 4,096-character read limit: every firing alert and every notice it owed was gone.  An
incidents file past its own 8 MiB limit likewise restored nothing.  Now the writers keep every
text, entry and the whole file within what the readers accept, and say what they cut.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import httpx
from tests.detect.sidecar import settings
from tests.notify.fakes import alert

from poolwatch import fields
from poolwatch.detect.alert import Alert, AlertState
from poolwatch.detect.schema import Severity
from poolwatch.detect.track import MAX_DESCRIPTION
from poolwatch.model.findings import CallSite, CallSiteKind, Frame, Tripwire, TripwireKind
from poolwatch.model.rank import Pool
from poolwatch.model.snapshot import Snapshot
from poolwatch.probe.census.proofs import MAX_IDS, MAX_LEAK_IDS
from poolwatch.probe.core.call_site import MAX_ENGINE_FRAMES
from poolwatch.sidecar.alerting import build_alerting
from poolwatch.sidecar.incidents.file import MAX_BYTES, incidents_path, read_incidents
from poolwatch.sidecar.incidents.log import IncidentLog
from poolwatch.sidecar.persist import load_state, save_alerts
from poolwatch.sidecar.state_fit import MAX_STATE_BYTES
from poolwatch.sidecar.store import SnapshotStore
from rigs.fakes.clock import FakeClock

LONG = fields.MAX_NAME  # every name the schema takes is at most this long: the probe's largest
DOUBLE = (TripwireKind.FREE_DUPLICATE, TripwireKind.FREE_AND_LIVE, TripwireKind.FREE_AND_TREE)


def _name(tag: str) -> str:
    return (tag + "-" + "x" * LONG)[:LONG]


def largest_site(seq: int) -> CallSite:
    frames = tuple(
        Frame(_name(f"sglang/srt/frame{i}.py"), 10_000 + i, _name(f"Scheduler.f{i}"))
        for i in range(MAX_ENGINE_FRAMES)
    )
    return CallSite(CallSiteKind.FREE, frames, seq)


def largest_tripwire(kind: TripwireKind, pool: Pool, n: int) -> Tripwire:
    """A tripwire as large as the probe makes one: every id it names, every request, every frame,
    each name as long as the wire allows."""
    ids = MAX_LEAK_IDS if kind is TripwireKind.MISSING else MAX_IDS
    return Tripwire(
        kind=kind,
        pool=pool,
        slots=tuple(range(n * 10_000, n * 10_000 + ids)),
        first_seen_hook=_name(f"hook{n}"),
        seq=100 + n,
        requests=tuple(_name(f"rid{n}.{r}") for r in range(MAX_IDS)),
        total=ids * 3,
        call_site=largest_site(100 + n),
    )


def rank_snapshot(seed: Snapshot, rank: int, tripwires: tuple[Tripwire, ...], at: float) -> Snapshot:
    worker = replace(seed.worker, worker=_name(f"worker{rank}"), model=_name("/models/m"), tp_rank=rank)
    return replace(seed, worker=worker, tripwires=tripwires, taken_at=at, boot_id=f"boot{rank}")


async def test_a_restart_after_100_incidents_with_the_largest_texts_restores_every_alert_and_incident(
    tmp_path: Path, seed_snapshot: Snapshot
) -> None:
    clock = FakeClock()
    config = settings(tmp_path, alertmanager_urls=(), webhook_urls=("http://hook.example:1/x",))
    down = httpx.MockTransport(lambda _: httpx.Response(503))  # nothing is ever told: all owed
    store = SnapshotStore(clock=clock)
    alerting = build_alerting(config, store, clock, transport=down)
    incidents = IncidentLog(
        store, {"version": "9.9", "settings": {}}, incidents_path(str(tmp_path / "alerts.json"))
    )
    store.subscribe(incidents.observe)
    await alerting.start()
    kinds = (*DOUBLE, TripwireKind.MISSING, TripwireKind.OUT_OF_RANGE)
    for rank in range(10):  # 10 ranks x 10 findings: 100 distinct incidents
        wires = tuple(
            largest_tripwire(kinds[n % 5], (Pool.MAMBA, Pool.FULL)[n % 2], rank * 10 + n) for n in range(10)
        )
        clock.advance(1)
        store.put(rank_snapshot(seed_snapshot, rank, wires, clock.now))
    alerting.evaluate()
    firing = [a for a in alerting.detector.alerts() if a.state is AlertState.FIRING]
    incidents.flush()
    await alerting.stop()
    assert len(incidents.listed()) == 100
    assert max(len(a.annotations["description"]) for a in firing) <= MAX_DESCRIPTION  # cut, and says so
    assert any("characters cut]" in a.annotations["description"] for a in firing)

    state = load_state(Path(config.alerting.state_file))
    assert state.set_aside is None
    assert not state.error
    assert {a.fingerprint for a in state.alerts} == {a.fingerprint for a in firing}
    restored = read_incidents(incidents_path(config.alerting.state_file) or Path())
    assert len(restored) == 100
    assert {r.id for r in restored} == {i["id"] for i in incidents.listed()}

    again = build_alerting(config, SnapshotStore(clock=clock), clock, transport=down)
    assert {a.fingerprint for a in again.detector.alerts() if a.state is AlertState.FIRING} == {
        a.fingerprint for a in firing
    }


def test_the_issue_s_twelve_tripwires_of_a_recurring_double_free_are_restored(
    tmp_path: Path, seed_snapshot: Snapshot
) -> None:
    """2 slots, 8 request ids, 8 frames each: what the probe emits for a recurring double free."""
    site = CallSite(
        CallSiteKind.FREE,
        tuple(
            Frame(f"sglang/srt/mem_cache/memory_pool{i}.py", 387 + i, f"MambaPool.free{i}") for i in range(8)
        ),
        3,
    )
    wires = tuple(
        Tripwire(TripwireKind.FREE_DUPLICATE, Pool.MAMBA, (2 * n, 2 * n + 1), "process_prefill_chunk", n,
                 tuple(f"7f3e9c2a41d84b0e9a6c55d1e2f0{n:02d}{r:02d}" for r in range(8)), call_site=site)
        for n in range(12)
    )  # fmt: skip
    clock = FakeClock()
    config = settings(tmp_path)
    store = SnapshotStore(clock=clock)
    alerting = build_alerting(
        config, store, clock, transport=httpx.MockTransport(lambda _: httpx.Response(200))
    )
    store.put(replace(seed_snapshot, tripwires=wires, taken_at=clock.now))
    alerting.evaluate()
    (double,) = [a for a in alerting.detector.alerts() if a.name == "PoolwatchDoubleFree"]
    save_alerts(Path(config.alerting.state_file), [double])
    state = load_state(Path(config.alerting.state_file))
    assert [a.fingerprint for a in state.alerts] == [double.fingerprint]
    assert state.alerts[0].annotations == double.annotations


def _alert(n: int, text: int, severity: Severity = Severity.CRITICAL) -> Alert:
    return alert(
        FakeClock(float(n)),
        subject=f"w{n}/dp0-tp0-pp0@probe",
        severity=severity,
        labels=(("worker", f"w{n}"),),
        annotations={"description": "d" * text, "summary": "s" * 5000},
    )


def test_texts_past_the_reader_s_limit_are_cut_and_said_cut_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "alerts.json"
    save_alerts(path, [_alert(1, 100_000)])
    doc = json.loads(path.read_bytes())
    assert doc["cut"]["texts"] == 2
    (alert,) = load_state(path).alerts
    assert fields.MAX_TEXT - 2 <= len(alert.annotations["description"]) <= fields.MAX_TEXT
    assert alert.annotations["description"].endswith("characters cut]")


def test_a_state_past_the_file_s_limit_cuts_annotations_first_and_loses_no_alert(tmp_path: Path) -> None:
    alerts = [_alert(n, 4096) for n in range(3000)]
    owed = {
        "webhook:a": [
            replace(_alert(n, 4096), state=AlertState.RESOLVED, resolved_at=9.0) for n in range(500)
        ]
    }
    path = tmp_path / "alerts.json"
    save_alerts(path, alerts, undelivered=owed)
    assert path.stat().st_size <= MAX_STATE_BYTES
    state = load_state(path)
    assert len(state.alerts) == 3000
    assert len(state.undelivered["webhook:a"]) == 500
    assert json.loads(path.read_bytes())["cut"] == {"alerts": 0, "entries": 0, "notices": 0, "texts": 7000}


def test_past_that_the_owed_notices_then_the_least_severe_alerts_are_left_out_and_counted(
    tmp_path: Path,
) -> None:
    labels = tuple((f"label{i:02d}", "v" * 60) for i in range(20))
    alerts = [
        replace(
            _alert(n, 300, Severity.CRITICAL if n < 1500 else Severity.INFO),
            labels=(("worker", f"w{n}"), *labels),
        )
        for n in range(6000)
    ]
    owed = {"webhook:a": [replace(a, state=AlertState.RESOLVED, resolved_at=9.0) for a in alerts[:500]]}
    path = tmp_path / "alerts.json"
    save_alerts(path, alerts, undelivered=owed)
    assert path.stat().st_size <= MAX_STATE_BYTES
    cut = json.loads(path.read_bytes())["cut"]
    state = load_state(path)
    assert state.set_aside is None
    assert state.undelivered == {}
    assert cut["notices"] == 500
    assert len(state.alerts) + cut["alerts"] == 6000
    kept = {a.severity for a in state.alerts}
    assert sum(a.severity is Severity.CRITICAL for a in state.alerts) == 1500
    assert Severity.INFO in kept


def test_an_incidents_file_never_passes_its_limit_and_every_record_is_read_back(
    tmp_path: Path, seed_snapshot: Snapshot
) -> None:
    clock = FakeClock()
    store = SnapshotStore(clock=clock, history=64)
    path = tmp_path / "alerts.incidents.json"
    huge = {
        "settings": {
            "targets": {"probe_urls": [f"http://10.0.{i // 250}.{i % 250}:9000" for i in range(5000)]}
        }
    }
    incidents = IncidentLog(store, {"version": "9.9", **huge}, path)
    store.subscribe(incidents.observe)
    queues = {_name(f"q{i}"): i for i in range(32)}
    for rank in range(10):  # 10 ranks x 10 leaks, each as large as the probe makes one: 100 incidents
        wires = tuple(
            replace(
                largest_tripwire(TripwireKind.MISSING, Pool.FULL, rank * 10 + n),
                first_seen_hook=_name(f"h{n}"),
            )
            for n in range(10)
        )
        for seq in range(8):  # moments before, at and after the first sighting
            clock.advance(1)
            snap = replace(rank_snapshot(seed_snapshot, rank, wires if seq >= 6 else (), clock.now),
                           seq=seq, queues=queues)  # fmt: skip
            store.put(snap)
    incidents.flush()
    assert path.stat().st_size <= MAX_BYTES
    restored = read_incidents(path)
    assert len(restored) == 100
    assert all(
        r.body["moments"][r.body["first_moment"]]["seq"] == 6 for r in restored
    )  # the first sighting kept
    assert restored[0].body["cut"]
