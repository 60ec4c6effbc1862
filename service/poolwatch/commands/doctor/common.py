"""The checks both sides make: the discovery directory as this user trusts it, the ranks announced
in it and whether they answer, the sidecar that should follow them, and Prometheus.

Each function reads (the disk, loopback HTTP through the injected ``httpx.Client``) and returns
:class:`~poolwatch.commands.doctor.report.Check` values; none raises for what it finds.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from poolwatch.commands.doctor.report import Check, Fault, Status
from poolwatch.discovery.directory import scan_discovery_dir
from poolwatch.discovery.entry import DiscoveryEntry
from poolwatch.discovery.safety import UnsafePathError, check_ancestors, check_directory

__all__ = ["Announced", "announced", "directory_check", "prometheus_check", "sidecar_check"]

TIMEOUT_S = 3.0
_UNREADABLE = (httpx.HTTPError, ValueError, KeyError, TypeError)  # no answer, or not the JSON it should be


@dataclass(frozen=True, slots=True)
class Announced:
    """A rank's discovery file and whether its endpoint answered."""

    entry: DiscoveryEntry
    answers: bool
    why: str = ""

    @property
    def target(self) -> str:
        """The name the sidecar gives it (``probe:<worker>/dp0-tp0-pp0``, sources/targets.py)."""
        e = self.entry
        return f"probe:{e.worker}/dp{e.dp_rank}-tp{e.tp_rank}-pp{e.pp_rank}"


def _whose(path: Path) -> str:
    try:
        return f"uid {path.stat().st_uid}"
    except OSError:
        return "another user"


def directory_check(path: str, who: str, *, missing_ok: bool) -> Check:
    """Whether ``path`` exists and this process (``who``: the engine or the sidecar) trusts it: its
    own or root's, writable by no one else, under directories no one else may rename it in."""
    me = f"uid {os.geteuid()}"
    if not os.path.lexists(path):
        if missing_ok:
            return Check("directory", Status.OK, f"{path} does not exist yet; the first rank makes it")
        return Check(
            "directory",
            Status.FAIL,
            f"{path} does not exist in the {who}'s filesystem",
            "mount the probe volume here, or set POOLWATCH_PROBE_DIR to where the engine's probes announce "
            "themselves (the engine's POOLWATCH_PROBE_DIR)",
            Fault.WRONG_DIRECTORY,
        )
    try:
        check_directory(path)
        check_ancestors(path)
    except UnsafePathError as exc:
        if "owned by uid" in str(exc):
            return Check(
                "directory",
                Status.FAIL,
                f"{exc}: the {who} runs as {me} and trusts only its own files and root's",
                f"run the {who} as the directory's owner ({_whose(Path(path))}: securityContext.runAsUser), "
                "or let the user the engine runs as make it (remove it; the first rank makes it anew)",
                Fault.UID_MISMATCH,
            )
        return Check(
            "directory",
            Status.FAIL,
            f"{exc}",
            "use a directory only its owner may write (0755; an emptyDir's root is world-writable: "
            "use a directory inside it, as the manifests do)",
            Fault.UNSAFE_DIRECTORY,
        )
    except OSError as exc:
        return Check("directory", Status.FAIL, f"{path}: {exc}", "", Fault.WRONG_DIRECTORY)
    return Check("directory", Status.OK, f"{path}: trusted by the {who} ({me})")


def announced(path: str, client: httpx.Client) -> tuple[list[Announced], dict[str, str]]:
    """The ranks announced in ``path`` (as the sidecar reads them) with whether each answers, and
    the files skipped with why (none for a directory that does not exist: the directory check says so)."""
    if not os.path.lexists(path):
        return [], {}
    entries, skipped = scan_discovery_dir(path)
    out = []
    for entry in entries:
        try:
            answer = client.get(f"{entry.url}/healthz", timeout=TIMEOUT_S)
            out.append(Announced(entry, answer.status_code == 200, f"HTTP {answer.status_code}"))
        except httpx.HTTPError as exc:
            out.append(Announced(entry, False, type(exc).__name__))
    return out, skipped


def attached_check(ranks: Sequence[Announced], skipped: dict[str, str], path: str, hint: str) -> Check:
    """Whether ranks announced themselves in ``path`` and answer (``hint``: what to look at when none did)."""
    if not ranks:
        why = f"; skipped: {'; '.join(f'{k}: {v}' for k, v in sorted(skipped.items()))}" if skipped else ""
        return Check(
            "attached", Status.FAIL, f"no rank announced itself in {path}{why}", hint, Fault.NOT_ATTACHED
        )
    silent = [r for r in ranks if not r.answers]
    names = ", ".join(f"{r.target.removeprefix('probe:')} at {r.entry.url}" for r in ranks)
    if silent:
        gone = ", ".join(f"{r.target.removeprefix('probe:')} ({r.why})" for r in silent)
        return Check(
            "attached",
            Status.FAIL,
            f"{len(ranks)} rank(s) announced, {len(silent)} do not answer: {gone}",
            "a rank that does not answer is gone (its file outlived it) or on another host's loopback",
            Fault.UNREACHABLE,
        )
    return Check("attached", Status.OK, f"{len(ranks)} rank(s) announced and answering: {names}")


def _get_json(client: httpx.Client, base: str, path: str, **params: str) -> Any:
    """The JSON document at ``path`` of the server at ``base`` (raises one of ``_UNREADABLE``)."""
    answer = client.get(f"{base.rstrip('/')}{path}", params=params or None, timeout=TIMEOUT_S)
    answer.raise_for_status()
    return answer.json()


def sidecar_check(ranks: Sequence[Announced], sidecar: str, path: str, client: httpx.Client) -> Check:
    """Whether the sidecar at ``sidecar`` follows every rank announced in ``path``."""
    if not sidecar:
        return Check("discovered", Status.SKIP, "not checked: give --sidecar URL (the sidecar's port 9464)")
    try:
        targets = {t["name"]: t for t in _get_json(client, sidecar, "/api/v1/targets")}
    except _UNREADABLE as exc:
        return Check(
            "discovered",
            Status.FAIL,
            f"no sidecar answers at {sidecar} ({type(exc).__name__})",
            "start the sidecar (`poolwatch serve`), or give --sidecar the URL it serves on",
            Fault.NO_SIDECAR,
        )
    if not ranks:
        return Check("discovered", Status.SKIP, "nothing to look for: no rank is announced")
    missing = [r.target for r in ranks if r.target not in targets]
    if len(missing) == len(ranks):
        return Check(
            "discovered",
            Status.FAIL,
            f"the sidecar at {sidecar} follows none of the {len(ranks)} rank(s) announced in {path}: "
            "it reads another directory, or none",
            f"set the sidecar's POOLWATCH_PROBE_DIR to {path} and mount the probe volume in both containers "
            "(`poolwatch doctor --side sidecar` in the sidecar's container says what it reads)",
            Fault.WRONG_DIRECTORY,
        )
    down = [n for n, t in targets.items() if n.startswith("probe:") and not t.get("up")]
    if missing or down:
        return Check(
            "discovered",
            Status.WARN,
            f"the sidecar follows {len(ranks) - len(missing)} of {len(ranks)} rank(s); "
            f"not followed: {', '.join(missing) or 'none'}; down: {', '.join(down) or 'none'}",
            "a rank just started is followed at the sidecar's next scan (1 s); a down one says why in "
            "/api/v1/targets (last_error)",
            Fault.NOT_DISCOVERED,
        )
    return Check(
        "discovered", Status.OK, f"the sidecar at {sidecar} follows all {len(ranks)} rank(s), all up"
    )


def prometheus_check(workers: Sequence[str], prometheus: str, client: httpx.Client) -> Check:
    """Whether Prometheus at ``prometheus`` has the ranks' series (``poolwatch_worker_info``)."""
    if not prometheus:
        return Check("scraped", Status.SKIP, "not checked: give --prometheus URL")
    if not workers:
        return Check("scraped", Status.SKIP, "nothing to look for: no worker is known")
    names = "|".join(sorted(set(workers)))
    query = f'count by (worker) (poolwatch_worker_info{{worker=~"{names}"}})'
    try:
        result = _get_json(client, prometheus, "/api/v1/query", query=query)["data"]["result"]
        found = {r["metric"].get("worker", "") for r in result}
    except _UNREADABLE as exc:
        return Check(
            "scraped",
            Status.FAIL,
            f"Prometheus at {prometheus} did not answer ({exc})",
            "",
            Fault.NOT_SCRAPED,
        )
    missing = sorted(set(workers) - found)
    if missing:
        return Check(
            "scraped",
            Status.FAIL,
            f"Prometheus has no poolwatch series of {', '.join(missing)}",
            "the PodMonitor must select the pod and Prometheus the PodMonitor (kube-prometheus-stack: "
            "the label release: <its release>); runbook PoolwatchNotScraped",
            Fault.NOT_SCRAPED,
        )
    return Check("scraped", Status.OK, f"Prometheus has the series of {', '.join(sorted(found))}")
