"""What ``poolwatch demo`` prints at its end: where a newcomer looks next.

The status page and ``/metrics`` of the demo's sidecar, the runbook of every alert that fired, the
Grafana dashboards with how to load them, and the incidents file the run left with the commands
that list and export it.  Paths are the clone's where the demo runs in one
(``scripts/demo`` does), links to the repository otherwise (an installed wheel carries neither
the runbooks nor the dashboards).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

__all__ = ["DASHBOARDS_URL", "REPO_URL", "where_next"]

REPO_URL = "https://github.com/poolwatch/poolwatch"
DASHBOARDS_URL = f"{REPO_URL}/tree/main/dashboards"
DEPLOY_DOC = Path("docs", "deploy.md")


def _runbook(name: str, url: str, root: Path) -> str:
    local = Path("docs", "runbooks", f"{name}.md")
    return f"{name}: {local if (root / local).is_file() else url or '(no runbook link)'}"


def _dashboards(root: Path) -> str:
    found = sorted(p.relative_to(root) for p in (root / "dashboards").glob("*.json"))
    return ", ".join(map(str, found)) if found else DASHBOARDS_URL


def _deploy_doc(root: Path) -> str:
    where = DEPLOY_DOC if (root / DEPLOY_DOC).is_file() else f"{REPO_URL}/blob/main/{DEPLOY_DOC.as_posix()}"
    return f"{where}#grafana-dashboards"


def _incidents(path: Path | None) -> list[str]:
    if path is None:
        return []
    if not path.is_file():
        return [f"  incidents    none recorded (they would be kept in {path})"]
    out = path.parent / "incidents"
    return [
        f"  incidents    kept in {path}",
        f"               poolwatch incident list --file {path}",
        f"               poolwatch incident export --file {path} --out {out}",
    ]


def where_next(url: str, fired: Mapping[str, str], root: Path, incidents: Path | None = None) -> str:
    """The closing block: ``url`` is the demo sidecar's, ``fired`` maps each alert that fired to
    its ``runbook_url``, ``root`` is where the demo runs (a clone, or anywhere), ``incidents`` the
    sidecar's incidents file (None: the sidecar kept none)."""
    runbooks = [_runbook(name, link, root) for name, link in sorted(fired.items())]
    lines = [
        "where to look next:",
        f"  status page  {url}/ (each rank's pools, the gap, the firing alerts; live while a demo runs)",
        f"  metrics      {url}/metrics (poolwatch_pool_conservation_gap_slots, ...)",
        f"  alerts       {url}/api/v1/alerts (the sidecar's pending and firing alerts, JSON)",
        f"  runbooks     {runbooks[0] if runbooks else 'nothing fired'}",
        *(f"               {line}" for line in runbooks[1:]),
        f"  dashboards   {_dashboards(root)}",
        "               import by hand: Grafana > Dashboards > New > Import, paste the JSON, pick Prometheus",
        f"               in a cluster (ConfigMap, file provisioning): {_deploy_doc(root)}",
        *_incidents(incidents),
    ]
    return "\n".join(lines)
