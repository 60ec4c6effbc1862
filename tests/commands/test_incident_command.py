"""``poolwatch incident list|export``: the bundles a sidecar serves, or its saved file, written as
``<id>.json`` and ``<id>.md``; an unknown id is exit 1, an unreachable sidecar or file exit 2."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from tests.helpers import free_port

from poolwatch.cli import main
from poolwatch.commands.incident import (
    file_summaries,
    list_line,
    sidecar_bodies,
    sidecar_summaries,
    write_bundle,
)
from poolwatch.model.findings import CallSite, CallSiteKind, Frame, Tripwire, TripwireKind
from poolwatch.model.rank import Pool
from poolwatch.model.snapshot import Snapshot
from poolwatch.sidecar.incidents.export import bundle_json, bundle_markdown
from poolwatch.sidecar.incidents.log import IncidentLog
from poolwatch.sidecar.store import SnapshotStore

SITE = CallSite(
    CallSiteKind.FREE,
    (Frame("vllm/v1/core/single_type_kv_cache_manager.py", 604, "SingleTypeKVCacheManager.free"),),
)


def _incidents(seed: Snapshot, path: Path | None = None) -> IncidentLog:
    store = SnapshotStore()
    log = IncidentLog(store, {"version": "9.9", "settings": {}}, path)
    store.subscribe(log.observe)
    wire = Tripwire(TripwireKind.REF_BELOW_OWNERS, Pool.FULL, (6,), "schedule", 2, call_site=SITE)
    for seq in (1, 2, 3):
        store.put(replace(seed, seq=seq, taken_at=seed.taken_at + seq, tripwires=(wire,) if seq > 1 else ()))
    log.flush()
    return log


def _serving(log: IncidentLog) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/api/v1/incidents":
            return httpx.Response(200, json=log.listed())
        body = log.bundle(path.rsplit("/", 1)[-1])
        return httpx.Response(404) if body is None else httpx.Response(200, json=bundle_json(body))

    return httpx.MockTransport(answer)


def test_a_sidecar_s_bundles_are_written_as_they_are_served(seed_snapshot: Snapshot, tmp_path: Path) -> None:
    log = _incidents(seed_snapshot)
    (body,) = sidecar_bodies("http://sidecar:9464", _serving(log))([])
    paths = write_bundle(tmp_path, body)
    ident = log.listed()[0]["id"]
    assert [p.name for p in paths] == [f"{ident}.json", f"{ident}.md"]
    original = log.bundle(ident)
    assert original is not None
    assert json.loads(paths[0].read_text()) == bundle_json(original)
    assert paths[1].read_text() == bundle_markdown(original)


def test_export_from_the_saved_file_and_list_one_line_each(
    seed_snapshot: Snapshot, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = tmp_path / "state" / "alerts.incidents.json"
    log = _incidents(seed_snapshot, saved)
    ident = log.listed()[0]["id"]
    assert main(["incident", "list", "--file", str(saved)]) == 0
    line = capsys.readouterr().out.strip()
    seen = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(seed_snapshot.taken_at + 2))
    assert line == (
        f"{ident}  {seen}  {seed_snapshot.worker.key}  sglang 0.5.4.post1  "
        "tripwire ref_below_owners full x1  "
        "free: vllm/v1/core/single_type_kv_cache_manager.py:604 SingleTypeKVCacheManager.free"
    )
    assert "qwen3-next-prefill-0/dp0-tp0-pp0" in line  # the rank: worker and its dp, tp, pp
    assert (
        main(["incident", "export", "--file", str(saved), "--id", ident, "--out", str(tmp_path / "out")]) == 0
    )
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [f"{ident}.json", f"{ident}.md"]


def test_an_unknown_id_is_exit_1_and_an_unreadable_source_exit_2(
    seed_snapshot: Snapshot, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = tmp_path / "state" / "alerts.incidents.json"
    _incidents(seed_snapshot, saved)
    assert main(["incident", "list", "--file", str(saved), "--id", "pw-0000000000000000"]) == 1
    assert "no incident 'pw-0000000000000000'" in capsys.readouterr().err
    assert main(["incident", "list", "--file", str(tmp_path / "none.json")]) == 2
    assert main(["incident", "list", "--sidecar", f"http://127.0.0.1:{free_port()}"]) == 2
    assert "poolwatch incident:" in capsys.readouterr().err


def test_the_list_from_a_running_sidecar_names_rank_and_time_as_the_file_does(
    seed_snapshot: Snapshot, tmp_path: Path
) -> None:
    saved = tmp_path / "alerts.incidents.json"
    log = _incidents(seed_snapshot, saved)
    served = sidecar_summaries("http://sidecar:9464", transport=_serving(log))([])
    from_file = file_summaries(saved)([])
    assert [list_line(s) for s in served] == [list_line(s) for s in from_file]
    assert served[0]["rank"] == seed_snapshot.worker.key
