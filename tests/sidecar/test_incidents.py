"""The incidents a sidecar keeps: one per finding or guard action, the rank's figures around it, its
best call site, bounded, saved across a restart, served read-only as JSON and Markdown bundles."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import replace
from pathlib import Path

from tests.helpers import asgi_client

from poolwatch.model.findings import CallSite, CallSiteKind, Frame, Repair, RepairKind, Tripwire, TripwireKind
from poolwatch.model.rank import Pool
from poolwatch.model.snapshot import ProbeHealth, Snapshot
from poolwatch.settings.sidecar import Settings
from poolwatch.sidecar.app import create_app
from poolwatch.sidecar.incidents.export import bundle_json, bundle_markdown
from poolwatch.sidecar.incidents.file import incidents_path
from poolwatch.sidecar.incidents.log import IncidentLog
from poolwatch.sidecar.incidents.record import AFTER, BEFORE
from poolwatch.sidecar.store import SnapshotStore
from rigs.fakes.clock import FakeClock

FREED = CallSite(
    CallSiteKind.FREE,
    (
        Frame("sglang/srt/mem_cache/memory_pool.py", 387, "HybridReqToTokenPool.free"),
        Frame(
            "sglang/srt/disaggregation/prefill.py",
            599,
            "SchedulerDisaggregationPrefillMixin.process_prefill_chunk",
        ),
    ),
    seq=7,
)
AT_HOOK = CallSite(
    CallSiteKind.HOOK, (Frame("sglang/srt/managers/scheduler.py", 1020, "Scheduler.event_loop"),), 5
)
WIRE = Tripwire(TripwireKind.FREE_AND_LIVE, Pool.MAMBA, (3,), "process_prefill_chunk", 5, ("rid-1",))


def _feed(store: SnapshotStore, seed: Snapshot, seqs: range, **changes: object) -> None:
    for seq in seqs:
        store.put(replace(seed, seq=seq, taken_at=seed.taken_at + seq, boot_id="b1", **changes))  # type: ignore[arg-type]


def _log(store: SnapshotStore, path: Path | None = None, limit: int = 100) -> IncidentLog:
    incidents = IncidentLog(
        store, {"version": "9.9", "settings": {"scrape": {"history": 256}}}, path, limit=limit
    )
    incidents.restore()
    store.subscribe(incidents.observe)
    return incidents


def test_a_tripwire_is_one_incident_with_the_figures_before_at_and_after_it(seed_snapshot: Snapshot) -> None:
    store = SnapshotStore()
    incidents = _log(store)
    _feed(store, seed_snapshot, range(0, 5))
    _feed(store, seed_snapshot, range(5, 5 + AFTER + 4), tripwires=(replace(WIRE, call_site=FREED),))
    (listed,) = incidents.listed()
    body = incidents.bundle(listed["id"])
    assert body is not None
    assert listed["rank"] == seed_snapshot.worker.key
    assert body["finding"] == {
        "record": "tripwire",
        "kind": "free_and_live",
        "pool": "mamba",
        "ids": [3],
        "page_size": 1,
        "requests": ["req-" + hashlib.sha256(b"rid-1").hexdigest()[:12]],
        "count": 1,
        "hook": "process_prefill_chunk",
        "seq": 5,
    }
    figures = bundle_json(body)["figures"]
    assert (figures["before"]["seq"], figures["at"]["seq"], figures["after"]["seq"]) == (4, 5, 5 + AFTER)
    assert figures["at"]["pools"]["mamba"]["gap"] == -1
    assert len(body["moments"]) == BEFORE - 1 + 1 + AFTER  # 5 earlier snapshots were all there was
    assert body["times_seen"] == AFTER + 4
    assert body["call_site"]["frames"][1]["function"].endswith("process_prefill_chunk")


def test_a_free_s_call_site_replaces_a_hook_s_and_the_incident_keeps_where_it_was_first_seen(
    seed_snapshot: Snapshot,
) -> None:
    store = SnapshotStore()
    incidents = _log(store)
    _feed(store, seed_snapshot, range(5, 7), tripwires=(replace(WIRE, call_site=AT_HOOK),))
    _feed(store, seed_snapshot, range(7, 9), tripwires=(replace(WIRE, call_site=FREED),))
    _feed(store, seed_snapshot, range(9, 10), tripwires=(replace(WIRE, call_site=AT_HOOK),))
    (listed,) = incidents.listed()
    assert listed["call_site"]["kind"] == "free"
    assert listed["first_seen_at"] == seed_snapshot.taken_at + 5


def test_guard_s_refusals_are_one_incident_per_pool_that_grows(seed_snapshot: Snapshot) -> None:
    store = SnapshotStore()
    incidents = _log(store)
    health = ProbeHealth(guard=True, guard_return=True)
    for seq, count in ((3, 1), (4, 2), (6, 3)):
        done = Repair(
            RepairKind.REFUSE, Pool.MAMBA, count, (10 + seq,), "mamba_pool.free", seq, ("r",), call_site=FREED
        )
        _feed(store, seed_snapshot, range(seq, seq + 1), repairs=(done,), probe=health)
    (listed,) = incidents.listed()
    body = incidents.bundle(listed["id"])
    assert body is not None
    assert (body["finding"]["count"], body["finding"]["ids"], body["finding"]["seq"]) == (3, [16], 3)
    assert body["finding"]["last_action"] == {"hook": "mamba_pool.free", "seq": 6}
    assert body["guard"]["enabled"]
    assert body["guard"]["actions"][0]["kind"] == "refuse"
    assert "## Guard\n\nGuard was on." in bundle_markdown(body)


def test_at_most_the_limit_is_kept_the_one_seen_longest_ago_going_first(seed_snapshot: Snapshot) -> None:
    store = SnapshotStore()
    incidents = _log(store, limit=3)
    for seq in range(5):
        _feed(store, seed_snapshot, range(seq, seq + 1), tripwires=(replace(WIRE, seq=seq),))
    assert [i["first_seen_at"] - seed_snapshot.taken_at for i in incidents.listed()] == [4, 3, 2]


def test_incidents_survive_a_restart_and_the_same_finding_continues_its_record(
    seed_snapshot: Snapshot, tmp_path: Path
) -> None:
    path = tmp_path / "state" / "alerts.incidents.json"
    store = SnapshotStore()
    _feed(store, seed_snapshot, range(5, 7), tripwires=(replace(WIRE, call_site=FREED),))  # before the log
    first = _log(store, path)
    _feed(store, seed_snapshot, range(7, 8), tripwires=(replace(WIRE, call_site=FREED),))
    (before,) = first.listed()
    again = SnapshotStore()
    second = _log(again, path)  # a new sidecar process: the file is all it has
    assert second.listed() == [before]
    _feed(again, seed_snapshot, range(8, 9), tripwires=(replace(WIRE, call_site=FREED),))
    (after,) = second.listed()
    assert after["id"] == before["id"]
    assert after["last_seen_at"] == seed_snapshot.taken_at + 8


def test_a_corrupt_incidents_file_is_set_aside_and_the_sidecar_starts_empty(tmp_path: Path) -> None:
    path = tmp_path / "state" / "alerts.incidents.json"
    path.parent.mkdir(mode=0o700)
    path.write_text("{not json")
    path.chmod(0o600)
    assert _log(SnapshotStore(), path).listed() == []
    assert [p.name.split("-")[0] for p in path.parent.iterdir()] == ["alerts.incidents.json.corrupt"]


def test_the_incidents_file_lives_beside_the_alert_state_file() -> None:
    assert incidents_path("/tmp/poolwatch/alerts.json") == Path("/tmp/poolwatch/alerts.incidents.json")
    assert incidents_path("") is None


async def test_the_api_lists_incidents_and_serves_each_bundle_as_json_and_markdown(
    seed_snapshot: Snapshot, clock: FakeClock
) -> None:
    store = SnapshotStore()
    app = create_app(Settings.from_env({"POOLWATCH_WORKER": "test"}), store=store, sources=[], clock=clock)
    _feed(store, seed_snapshot, range(5, 7), tripwires=(replace(WIRE, call_site=FREED),))
    async with asgi_client(app) as client:
        listed = (await client.get("/api/v1/incidents")).json()
        ident = listed[0]["id"]
        bundle = await client.get(f"/api/v1/incidents/{ident}")
        page = await client.get(f"/api/v1/incidents/{ident}/bundle.md")
        unknown = await client.get("/api/v1/incidents/pw-0000000000000000")
        malformed = await client.get("/api/v1/incidents/..%2Fetc")
        posted = await client.post(f"/api/v1/incidents/{ident}")
    assert bundle.json()["figures"]["at"]["seq"] == 5
    assert bundle.json()["poolwatch"]["settings"]["scrape"]["history"] == 256  # the sidecar's own settings
    assert page.headers["content-type"].startswith("text/markdown")
    assert "| 1 | `sglang/srt/mem_cache/memory_pool.py` | 387 | `HybridReqToTokenPool.free` |" in page.text
    assert (unknown.status_code, malformed.status_code, posted.status_code) == (404, 404, 405)
    assert json.loads(json.dumps(bundle.json())) == bundle.json()


GOLDEN_MD = Path(__file__).parents[1] / "fixtures" / "golden" / "seed-incident.md"
GOLDEN_JSON = GOLDEN_MD.with_suffix(".json")


def test_the_seed_incident_s_bundle_matches_the_golden_files(seed_snapshot: Snapshot) -> None:
    """The seed (0.5.4.post1, Mamba double free) with guard's refusal inside ``mamba_pool.free``:
    the bundle's words and fields pinned (``POOLWATCH_UPDATE_GOLDEN=1`` rewrites them)."""
    store = SnapshotStore()
    incidents = IncidentLog(store, {"version": "golden", "settings": {"scrape": {"history": 256}}})
    store.subscribe(incidents.observe)
    health = ProbeHealth(samples_total=40, census_total=4, guard=True, guard_return=True)
    _feed(store, seed_snapshot, range(1, 4), probe=health)
    for seq in range(4, 8):
        done = Repair(
            RepairKind.REFUSE, Pool.MAMBA, seq - 3, (17,), "mamba_pool.free", seq, ("rid-1",), call_site=FREED
        )
        _feed(store, seed_snapshot, range(seq, seq + 1), repairs=(done,), probe=health)
    (listed,) = incidents.listed()
    body = incidents.bundle(listed["id"])
    assert body is not None
    markdown, doc = bundle_markdown(body), json.dumps(bundle_json(body), indent=1, sort_keys=True) + "\n"
    if os.environ.get("POOLWATCH_UPDATE_GOLDEN") == "1":
        GOLDEN_MD.write_text(markdown)
        GOLDEN_JSON.write_text(doc)
    assert markdown == GOLDEN_MD.read_text()
    assert doc == GOLDEN_JSON.read_text()
