"""``poolwatch incident`` against a sidecar or a file that lies (issue 42, break 3 and 6): nothing is
written outside ``--out``, no string from a bundle becomes Markdown or a terminal instruction.

Before: incident ids ``../../x`` and an absolute path from the sidecar were used as file names (four
files landed elsewhere, exit 0); snapshot strings with new lines put a heading and a link into
``bundle.md`` and raw carriage returns onto the terminal through ``incident list``.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from poolwatch.cli import main
from poolwatch.commands.incident import NotAnIncident, write_bundle
from poolwatch.model.findings import CallSite, CallSiteKind, Frame, Tripwire, TripwireKind
from poolwatch.model.rank import Pool
from poolwatch.model.snapshot import Snapshot
from poolwatch.sidecar.incidents.export import bundle_json, bundle_markdown
from poolwatch.sidecar.incidents.log import IncidentLog
from poolwatch.sidecar.store import SnapshotStore

HOSTILE = (
    "x\r\n# Pwned heading\n[click](https://evil.example/phish) <img src=x> \x1b]52;c;ZXZpbA==\x07\x1b[2J | `"
)


def _body(seed: Snapshot) -> dict[str, Any]:
    store = SnapshotStore()
    log = IncidentLog(store, {"version": "9.9", "settings": {}})
    store.subscribe(log.observe)
    site = CallSite(CallSiteKind.FREE, (Frame("sglang/srt/mem_cache/memory_pool.py", 387, "MambaPool.free"),))
    wire = Tripwire(TripwireKind.FREE_DUPLICATE, Pool.MAMBA, (6,), "schedule", 2, call_site=site)
    store.put(replace(seed, seq=2, tripwires=(wire,)))
    body = log.bundle(log.listed()[0]["id"])
    assert body is not None
    return bundle_json(body)


def _poison(body: dict[str, Any]) -> dict[str, Any]:
    """Every string a snapshot or a sidecar could put into a bundle, made hostile."""
    doc = json.loads(json.dumps(body))
    doc["engine"].update(release=HOSTILE, model=HOSTILE, role=HOSTILE, source=HOSTILE, engine=HOSTILE)
    doc["engine"]["ranks_seen"] = [HOSTILE]
    doc["finding"].update(hook=HOSTILE, kind=HOSTILE, pool=HOSTILE, requests=[HOSTILE], ids=[HOSTILE])
    doc["finding"]["count"] = HOSTILE
    doc["call_site"]["frames"] = [{"file": HOSTILE, "line": HOSTILE, "function": HOSTILE}]
    for m in doc["moments"]:
        m["queues"] = {HOSTILE: HOSTILE}
        m["phase"] = HOSTILE
        m["tripwires"] = [{"kind": HOSTILE, "pool": HOSTILE, "count": HOSTILE}]
    doc["poolwatch"]["version"] = HOSTILE
    doc["poolwatch"]["settings"] = {"x": "```\n# fenced out\n```"}
    return doc


def _outside_code(page: str) -> str:
    """The page's text outside inline code spans and fenced blocks."""
    out, fenced = [], False
    for line in page.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            out.append("".join(line.split("`")[0::2]))
    return "\n".join(out)


def test_no_string_of_a_bundle_becomes_markdown_or_a_control_character(seed_snapshot: Snapshot) -> None:
    page = bundle_markdown(_poison(_body(seed_snapshot)))
    assert not any(c in page for c in "\r\x1b\x07")
    outside = _outside_code(page)
    assert "evil" not in outside
    assert "Pwned" not in outside
    assert "<img" not in outside
    headings = [line for line in page.splitlines() if line.startswith("#")]
    assert all(not h.startswith("# ") or h.startswith("# poolwatch incident") for h in headings)
    assert "fenced out" not in outside  # the settings' backticks cannot close the JSON block
    rows = [line for line in page.splitlines() if line.startswith("| ")]
    header_cells = {len(r.replace("\\|", "").split("|")) for r in rows if "evil" in r}
    assert header_cells  # the hostile rows are there, and no "|" of theirs split a cell:
    for row in (r for r in rows if "evil" in r):
        assert "|" not in "".join(row.replace("\\|", "").split("`")[1::2])


@contextlib.contextmanager
def hostile_sidecar(listing: list[Any], bodies: dict[str, Any]) -> Iterator[str]:
    """A server that answers as a sidecar would, with what the test gives it."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/api/v1/incidents":
                doc: Any = listing
            else:
                doc = bodies.get(self.path.removeprefix("/api/v1/incidents/"), bodies.get("*"))
            data = json.dumps(doc).encode()
            self.send_response(200 if doc is not None else 404)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_ids_that_are_paths_are_refused_and_nothing_lands_outside_out(
    seed_snapshot: Snapshot, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = _body(seed_snapshot)
    outside = tmp_path / "outside"
    outside.mkdir()
    bad_ids = ["../../x", str(outside / "abs"), "../outside/y", "pw-0123456789abcdef/../../z", "pw-zz"]
    listing = [{"id": i} for i in [*bad_ids, good["id"]]]
    bodies = {good["id"]: good, "*": {**good, "id": "../../x"}}
    out = tmp_path / "a" / "b" / "out"
    with hostile_sidecar(listing, bodies) as url:
        code = main(["incident", "export", "--sidecar", url, "--out", str(out)])
    assert code == 2
    assert sorted(p.name for p in out.iterdir()) == [f"{good['id']}.json", f"{good['id']}.md"]
    written = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    assert written == sorted(out.iterdir())
    assert "is not an incident id" in capsys.readouterr().err


def test_a_sidecar_answering_with_another_id_s_body_is_refused(
    seed_snapshot: Snapshot, tmp_path: Path
) -> None:
    good = _body(seed_snapshot)
    other = "pw-00000000000000aa"
    with hostile_sidecar([{"id": other}], {other: {**good, "id": "../../x"}}) as url:
        assert main(["incident", "export", "--sidecar", url, "--out", str(tmp_path / "out")]) == 2
    assert list((tmp_path / "out").iterdir()) == []


def test_a_link_planted_at_a_bundle_s_name_is_replaced_never_followed(
    seed_snapshot: Snapshot, tmp_path: Path
) -> None:
    good = _body(seed_snapshot)
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    out = tmp_path / "out"
    out.mkdir()
    (out / f"{good['id']}.md").symlink_to(victim)
    write_bundle(out, good)
    assert victim.read_text() == "untouched"
    assert not (out / f"{good['id']}.md").is_symlink()


def test_a_body_that_does_not_render_is_refused_with_a_reason(
    seed_snapshot: Snapshot, tmp_path: Path
) -> None:
    good = _body(seed_snapshot)
    with pytest.raises(NotAnIncident, match="not an incident bundle"):
        write_bundle(tmp_path, {**good, "moments": "nope"})
    assert list(tmp_path.iterdir()) == []


def test_incident_list_prints_no_carriage_return_or_escape_sequence(
    seed_snapshot: Snapshot, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = _poison(_body(seed_snapshot))
    f, e = body["finding"], body["engine"]
    summary = {  # the list page (``GET /api/v1/incidents``) is what ``incident list`` reads
        "id": body["id"],
        "rank": HOSTILE,
        "record": f["record"],
        "kind": f["kind"],
        "pool": f["pool"],
        "count": f["count"],
        "engine": e["engine"],
        "release": e["release"],
        "first_seen_at": body["first_seen_at"],
        "call_site": body["call_site"],
    }
    with hostile_sidecar([summary], {body["id"]: body}) as url:
        assert main(["incident", "list", "--sidecar", url]) == 0
    printed = capsys.readouterr().out
    assert printed.count("\n") == 1
    assert not any(c in printed for c in "\r\x1b\x07")
    assert "␛]52" in printed  # shown, inert


def test_snapshot_strings_are_inert_from_the_codec_on(seed_snapshot: Snapshot) -> None:
    from poolwatch.codec.snapshot import dump_snapshot, parse_snapshot

    worker = replace(seed_snapshot.worker, release="0.11.0\x1b]52;c;ZXZpbA==\x07", model="m\r\nx")
    doc = dump_snapshot(replace(seed_snapshot, worker=worker, queues={"q\x1b[31m": 1}))
    snap = parse_snapshot(json.loads(json.dumps(doc)))
    assert snap.worker.release == "0.11.0␛]52;c;ZXZpbA==␇"
    assert snap.worker.model == "m␍␊x"
    assert list(snap.queues) == ["q␛[31m"]
