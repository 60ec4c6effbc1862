"""The end of ``poolwatch demo``: where to look next (status page, /metrics, the runbook of each
alert that fired, the dashboards and how to load them), as paths in a clone and links elsewhere."""

from __future__ import annotations

import io
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.helpers import REPO

from poolwatch.detect.config import RUNBOOK_BASE_URL
from poolwatch.detect.rules import alert_definitions
from poolwatch_emulator.demo import demo_home, state_file, work_dir
from poolwatch_emulator.demo_next import DASHBOARDS_URL, REPO_URL, where_next
from poolwatch_emulator.demo_story import Story

URL = "http://127.0.0.1:9464"
FIRED = {a.name: a.runbook_url(RUNBOOK_BASE_URL) for a in alert_definitions()[:2]}


def block_paths(text: str) -> list[str]:
    """The clone paths the block names (not the tails of links)."""
    return re.findall(r"(?<![\w/])(?:docs|dashboards)/[\w/.-]+\.(?:md|json)", text)


def test_in_a_clone_every_path_it_names_exists() -> None:
    text = where_next(URL, FIRED, REPO)
    assert text.startswith("where to look next:")
    assert f"{URL}/ " in text
    assert f"{URL}/metrics" in text
    for name in FIRED:
        assert f"{name}: docs/runbooks/{name}.md" in text
    paths = block_paths(text)
    assert {"dashboards/poolwatch-fleet.json", "dashboards/poolwatch-worker.json"} <= set(paths)
    assert all((REPO / p).is_file() for p in paths), paths
    assert "docs/deploy.md#grafana-dashboards" in text
    assert "## Grafana dashboards" in (REPO / "docs/deploy.md").read_text(encoding="utf-8")


def test_outside_a_clone_it_links_the_runbooks_and_the_dashboards(tmp_path: Path) -> None:
    text = where_next(URL, FIRED, tmp_path)
    for name, link in FIRED.items():
        assert f"{name}: {link}" in text
        assert link.startswith(REPO_URL)
        assert link.endswith(f"/docs/runbooks/{name}.md")
    assert DASHBOARDS_URL in text
    assert f"{REPO_URL}/blob/main/docs/deploy.md#grafana-dashboards" in text
    assert not block_paths(text)  # no clone path offered


def test_when_nothing_fired_it_says_so(tmp_path: Path) -> None:
    assert "runbooks     nothing fired" in where_next(URL, {}, tmp_path)


def test_the_story_ends_with_where_to_look_next() -> None:
    out = io.StringIO()
    cluster: Any = SimpleNamespace(crashed=[], schedulers=[])
    story = Story(
        cluster, [], Path("probes"), Path("logs"), Path("."), Any, 2.0, out, url=URL, fired=dict(FIRED)
    )
    story.finish()
    over, *rest = out.getvalue().splitlines()
    assert over.startswith("demo over:")
    assert rest[0] == "where to look next:"
    assert any(name in line for line in rest for name in FIRED)


def test_the_end_says_where_the_incidents_are_kept_and_how_to_export_them(tmp_path: Path) -> None:
    kept = tmp_path / "sidecar" / "alerts.incidents.json"
    kept.parent.mkdir()
    assert "none recorded (they would be kept in" in where_next(URL, FIRED, tmp_path, kept)
    kept.write_text("{}")
    lines = where_next(URL, FIRED, tmp_path, kept).splitlines()
    assert f"  incidents    kept in {kept}" in lines
    assert f"               poolwatch incident list --file {kept}" in lines
    assert (
        f"               poolwatch incident export --file {kept} --out {tmp_path / 'sidecar' / 'incidents'}"
        in lines
    )


def test_a_demo_run_is_kept_in_a_new_private_directory_under_the_state_home(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path / "state"), "HOME": str(tmp_path / "home")}
    assert demo_home(env) == tmp_path / "state" / "poolwatch" / "demo"
    assert demo_home({"HOME": str(tmp_path / "home")}) == tmp_path / "home/.local/state/poolwatch/demo"
    first = work_dir(None, env, 0.0)
    assert first == demo_home(env) / "19700101T000000Z"
    assert first.stat().st_mode & 0o777 == 0o700
    assert work_dir(None, env, 61.0) != first
    assert state_file(first) == first / "sidecar" / "alerts.json"
    given = tmp_path / "mine"
    assert work_dir(given, env, 0.0) == given
