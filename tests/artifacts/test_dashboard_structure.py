"""The dashboards' shape: committed as generated, stable ids, units, data source, layout, links."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.helpers import REPO

from poolwatch.artifacts.dashboards import artifacts, fleet_dashboard
from poolwatch.artifacts.grafana import DATASOURCE, GRID_WIDTH, PanelSpec, Query, layout
from poolwatch.artifacts.worker_dashboard import worker_dashboard
from poolwatch.catalog.metrics import by_name
from poolwatch.detect.config import FLEET_DASHBOARD_UID, RUNBOOK_BASE_URL, WORKER_DASHBOARD_UID, MixinConfig

DASHBOARDS = {FLEET_DASHBOARD_UID: fleet_dashboard(), WORKER_DASHBOARD_UID: worker_dashboard()}
UNIT_OF = {"slots": "suffix: slots", "seconds": "s"}
_CHANGES_UNIT = ("/", "rate(", "increase(", "count(")


def panels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in doc["panels"] if p["type"] != "row"]


def test_the_committed_dashboards_are_what_the_generator_writes() -> None:
    for path, content in artifacts(REPO, MixinConfig()).items():
        committed = REPO / path
        assert committed.is_file(), f"{path} is missing: run `poolwatch generate`"
        assert committed.read_text(encoding="utf-8") == content, f"{path} is stale: run `poolwatch generate`"


def test_the_committed_json_is_a_dashboard_with_a_stable_uid() -> None:
    for uid, doc in DASHBOARDS.items():
        committed = json.loads((REPO / "dashboards" / f"{uid}.json").read_text(encoding="utf-8"))
        assert committed["uid"] == uid == doc["uid"]
        assert len(uid) <= 40
        assert committed["schemaVersion"] >= 36
        assert "id" not in committed, "a provisioned dashboard must not carry a database id"


def test_every_panel_has_a_unit_a_description_and_reads_the_datasource_variable() -> None:
    for uid, doc in DASHBOARDS.items():
        for panel in panels(doc):
            where = f"{uid}: {panel['title']}"
            assert panel["fieldConfig"]["defaults"]["unit"], where
            assert panel["description"], where
            assert panel["datasource"] == DATASOURCE, where
            assert all(t["datasource"] == DATASOURCE for t in panel["targets"]), where


def test_panel_ids_are_unique_and_targets_have_distinct_ref_ids() -> None:
    for uid, doc in DASHBOARDS.items():
        ids = [p["id"] for p in doc["panels"]]
        assert len(ids) == len(set(ids)), uid
        for panel in panels(doc):
            refs = [t["refId"] for t in panel["targets"]]
            assert refs, f"{uid}: {panel['title']}"
            assert len(refs) == len(set(refs)), f"{uid}: {panel['title']}"


def test_panels_stay_on_the_grid_and_never_overlap() -> None:
    for uid, doc in DASHBOARDS.items():
        assert_no_overlap([p["gridPos"] for p in doc["panels"]], uid)


def assert_no_overlap(grids: list[dict[str, int]], where: str) -> None:
    taken: set[tuple[int, int]] = set()
    for g in grids:
        assert g["x"] >= 0, where
        assert g["x"] + g["w"] <= GRID_WIDTH, where
        cells = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & taken, f"{where}: {g} overlaps"
        taken |= cells


@given(
    st.lists(st.tuples(st.sampled_from(["row", "stat", "timeseries"]), st.integers(1, 24), st.integers(1, 9)))
)
def test_layout_places_any_sequence_of_panels_without_overlap(items: list[tuple[str, int, int]]) -> None:
    specs = [
        PanelSpec(kind, f"p{i}", (Query("up"),), "none", width=w, height=h)
        for i, (kind, w, h) in enumerate(items)
    ]
    placed = layout(specs)
    assert [p["id"] for p in placed] == list(range(1, len(specs) + 1))
    assert_no_overlap([p["gridPos"] for p in placed], "layout")


def test_a_panel_without_a_unit_is_refused() -> None:
    with pytest.raises(ValueError, match="has no unit"):
        layout([PanelSpec("stat", "Naked", (Query("up"),))])


def test_panels_showing_one_catalogued_quantity_use_its_unit() -> None:
    for uid, doc in DASHBOARDS.items():
        for panel in panels(doc):
            exprs = [t["expr"] for t in panel["targets"]]
            units = {by_name(m).unit for m in _plain_metrics(exprs)}
            if (
                len(units) == 1
                and "" not in units
                and not any(op in e for e in exprs for op in _CHANGES_UNIT)
            ):
                assert panel["fieldConfig"]["defaults"]["unit"] == UNIT_OF[units.pop()], (
                    f"{uid}: {panel['title']}"
                )


def _plain_metrics(exprs: list[str]) -> set[str]:
    return {
        word
        for e in exprs
        for word in e.replace("(", " ").replace("{", " ").split()
        if word.startswith("poolwatch_")
    }


def test_both_dashboards_draw_firing_poolwatch_alerts_as_annotations() -> None:
    for uid, doc in DASHBOARDS.items():
        exprs = [a.get("expr", "") for a in doc["annotations"]["list"]]
        # the whole expression is the alerts of the chosen engines (tests/artifacts/test_dashboard_engines.py)
        assert any(e.startswith('(ALERTS{alertname=~"Poolwatch.*", alertstate="firing"') for e in exprs), uid


def test_both_dashboards_link_each_other_and_the_runbooks() -> None:
    for uid, doc in DASHBOARDS.items():
        kinds = {link["type"]: link for link in doc["links"]}
        assert kinds["dashboards"]["tags"] == ["poolwatch"], uid
        assert "poolwatch" in doc["tags"], uid
        assert kinds["link"]["url"] == "${runbooks}", uid
        runbooks = next(v for v in doc["templating"]["list"] if v["name"] == "runbooks")
        assert runbooks["query"] == RUNBOOK_BASE_URL
    fleet_links = json.dumps(DASHBOARDS[FLEET_DASHBOARD_UID]["panels"])
    assert f"/d/{WORKER_DASHBOARD_UID}/" in fleet_links
    assert "${runbooks}/${__data.fields.alertname}.md" in fleet_links


def test_the_worker_dashboard_stacks_pool_states_against_capacity_for_each_pool() -> None:
    (panel,) = [p for p in DASHBOARDS[WORKER_DASHBOARD_UID]["panels"] if p.get("repeat") == "pool"]
    assert panel["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"] == "normal"
    legends = [t["legendFormat"] for t in panel["targets"]]
    assert legends == ["{{state}}", "capacity"]
    capacity = next(o for o in panel["fieldConfig"]["overrides"] if o["matcher"]["options"] == "capacity")
    assert {"id": "custom.stacking", "value": {"mode": "none", "group": "A"}} in capacity["properties"]
    assert set(by_name("poolwatch_pool_slots").labels) >= {"state", "pool"}


def test_every_dashboard_starts_with_a_prometheus_datasource_variable() -> None:
    for uid, doc in DASHBOARDS.items():
        first = doc["templating"]["list"][0]
        assert (first["name"], first["type"], first["query"]) == ("datasource", "datasource", "prometheus"), (
            uid
        )
