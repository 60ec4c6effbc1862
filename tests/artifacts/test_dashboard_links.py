"""Links between the alerts and the dashboards resolve: every rule's runbook exists where the
dashboards look for it, and every rule's dashboard link opens a dashboard that is shipped."""

from __future__ import annotations

import re

import yaml
from tests.helpers import REPO

from poolwatch.artifacts.worker_dashboard import worker_dashboard
from poolwatch.detect.config import FLEET_DASHBOARD_UID, GRAFANA_URL, RUNBOOK_BASE_URL, WORKER_DASHBOARD_UID

RULES = REPO / "deploy/kubernetes/base/prometheusrule.yaml"


def alerting_rules() -> list[dict[str, object]]:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [r for group in doc["spec"]["groups"] for r in group["rules"] if "alert" in r]


def test_every_rule_links_the_runbook_the_dashboards_link() -> None:
    base = RUNBOOK_BASE_URL
    for rule in alerting_rules():
        annotations = rule["annotations"]
        assert isinstance(annotations, dict)
        assert annotations["runbook_url"] == f"{base}/{rule['alert']}.md"


def test_every_runbook_the_dashboards_link_is_written() -> None:
    missing = sorted(
        {str(r["alert"]) for r in alerting_rules()} - {p.stem for p in (REPO / "docs/runbooks").glob("*.md")}
    )
    assert not missing, f"docs/runbooks/ lacks {missing}"


def test_every_rule_dashboard_link_opens_a_shipped_dashboard_with_known_variables() -> None:
    variables = {v["name"] for v in worker_dashboard()["templating"]["list"]}
    for rule in alerting_rules():
        annotations = rule["annotations"]
        assert isinstance(annotations, dict)
        url = str(annotations.get("dashboard_url", ""))
        if not url:
            continue
        match = re.match(r"^(?P<base>https?://[^/]+)/d/(?P<uid>[\w-]+)/[\w-]+(\?(?P<query>.*))?$", url)
        assert match, f"{rule['alert']}: {url} is not an absolute Grafana link"
        assert match["base"] == GRAFANA_URL, url
        assert match["uid"] in (FLEET_DASHBOARD_UID, WORKER_DASHBOARD_UID), (
            f"{rule['alert']} links /d/{match['uid']}, not shipped"
        )
        if match["uid"] == WORKER_DASHBOARD_UID:
            used = set(re.findall(r"var-(\w+)=", match["query"] or ""))
            assert used <= variables, f"{rule['alert']}: unknown variables {sorted(used - variables)}"
