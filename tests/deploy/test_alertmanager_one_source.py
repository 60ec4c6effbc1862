"""The plain Alertmanager configuration and the PD example's AlertmanagerConfig come from one
generator (poolwatch/artifacts/alertmanager/) and say the same: the same routes, waits and
receivers, the same three inhibit rules, the same templates; critical alerts leave at once."""

from __future__ import annotations

from typing import Any

import yaml
from tests.deploy.k8s import read

from poolwatch.artifacts.alertmanager.routing import CONFIG_PATH, OBJECT_PATH
from poolwatch.notify.paths import DIRECT, PATH_LABEL, RULES
from rigs.stack.manifests import Doc, load_all

CAMEL = {
    "groupBy": "group_by",
    "groupWait": "group_wait",
    "groupInterval": "group_interval",
    "repeatInterval": "repeat_interval",
}


def plain() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(read(CONFIG_PATH))
    return doc


def crd() -> Doc:
    (doc,) = load_all(read(OBJECT_PATH))
    return doc


def matcher(m: dict[str, str]) -> str:
    return f'{m["name"]}{m.get("matchType", "=")}"{m["value"]}"'  # the operator defaults to "="


def from_crd(route: dict[str, Any]) -> dict[str, Any]:
    out = {CAMEL.get(k, k): v for k, v in route.items() if k not in ("matchers", "routes")}
    out["matchers"] = [matcher(m) for m in route.get("matchers", [])]
    if "routes" in route:
        out["routes"] = [from_crd(r) for r in route["routes"]]
    return out


def poolwatch_route() -> dict[str, Any]:
    (route,) = plain()["route"]["routes"]
    out = dict(route)
    out["routes"] = [dict(r) for r in route["routes"]]
    return out


def test_both_route_poolwatch_alerts_alike() -> None:
    object_route = from_crd(crd()["spec"]["route"])
    assert object_route.pop("receiver") == "poolwatch-ticket"  # the object's own root needs one
    assert object_route == poolwatch_route()


def test_both_have_the_same_inhibit_rules() -> None:
    ours = [(r["source_matchers"], r["target_matchers"], r["equal"]) for r in plain()["inhibit_rules"]]
    theirs = [
        ([matcher(m) for m in r["sourceMatch"]], [matcher(m) for m in r["targetMatch"]], r["equal"])
        for r in crd()["spec"]["inhibitRules"]
    ]
    assert ours == theirs
    assert len(ours) == 4


def test_the_sidecars_copy_inhibits_the_rules_copy_of_the_very_same_alert() -> None:
    _, target, equal = next(
        (r["source_matchers"], r["target_matchers"], r["equal"])
        for r in plain()["inhibit_rules"]
        if f'{PATH_LABEL}="{DIRECT}"' in r["source_matchers"]
    )
    assert f'{PATH_LABEL}="{RULES}"' in target
    assert PATH_LABEL not in equal
    for label in ("alertname", "severity", "namespace", "pod", "worker", "dp_rank", "tp_rank", "pool"):
        assert label in equal


def test_critical_alerts_leave_at_once_and_warnings_are_batched() -> None:
    waits = {r["receiver"]: r.get("group_wait") for r in poolwatch_route()["routes"]}
    # leaves at once; the sidecar posts an incident's alerts in one request (notify/delivery.py)
    assert waits["poolwatch-page"] == "0s"
    assert {r["receiver"]: r.get("groupWait") for r in crd()["spec"]["route"]["routes"]}[
        "poolwatch-page"
    ] == "0s"
    assert poolwatch_route()["group_wait"] == "30s"  # warnings and info inherit it
    assert waits["poolwatch-ticket"] is None


def test_both_carry_the_same_templates() -> None:
    receivers = {r["name"]: r for r in plain()["receivers"]}
    objects = {r["name"]: r for r in crd()["spec"]["receivers"]}
    for name in ("poolwatch-page", "poolwatch-ticket"):
        assert receivers[name]["slack_configs"][0]["text"] == objects[name]["slackConfigs"][0]["text"]
    page, page_object = receivers["poolwatch-page"], objects["poolwatch-page"]
    assert page["pagerduty_configs"][0]["description"] == page_object["pagerdutyConfigs"][0]["description"]
    ticket, ticket_object = receivers["poolwatch-ticket"], objects["poolwatch-ticket"]
    assert ticket["email_configs"][0]["html"] == ticket_object["emailConfigs"][0]["html"]
    assert set(objects) == {r["name"] for r in plain()["receivers"]} - {"default"}
