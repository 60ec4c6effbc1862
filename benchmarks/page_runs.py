"""What one run of bench_page saw, and the rows of its tables.

A :class:`Run` is filled (:func:`observe`) from the child's events (``page_cluster.py``: when the
fault struck, when the worker crashed) and from what the loopback receivers got: the first webhook
notification of the fault's alert for that pool and worker (the page), the first Slack text naming
pool and rank, then pool, rank and slot ids, an ``[UPDATE]`` naming them, the PagerDuty incidents.
:func:`row`, :func:`update_row` and :func:`unreachable_row` turn a cell's runs into a table row.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from detection_cases import SIGN  # benchmarks/ (this script's directory is on sys.path)
from page_cluster import STARTUP
from page_figures import pct, spread

from poolwatch.artifacts.notification_text import UPDATE_MARK
from poolwatch.probe.core.config import ProbeConfig
from poolwatch_emulator.faults import FAULTS
from rigs.stack.receivers import Post, WebhookRecorder

SEED_FAULT = "pd-chunked-mamba-double-free"
IDS = re.compile(r"(?:slot|page)s?(?:\(s\))? \[\d")


@dataclass
class Run:
    struck: float | None = None
    worker: str = ""
    crashed: float | None = None
    paged: float | None = None  # first webhook notification of the fault's alert
    text: float | None = None  # first Slack text naming pool and rank
    ids: float | None = None  # first Slack text naming pool, rank and slot ids
    update: float | None = None  # first Slack "[UPDATE]" naming them (ids learned after the page)
    incidents: set[str] = field(default_factory=set)  # PagerDuty dedup_keys of the fault's events
    notes: list[str] = field(default_factory=list)


def events(log: Path) -> list[dict[str, Any]]:
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    return [json.loads(x) for x in lines if x.startswith('{"event"')]


def observe_slack(run: Run, post: Post, alert: str, pool: str) -> None:
    """A Slack message about the fault's alert on the run's worker: text, slot ids, update."""
    attachment = post.body.get("attachments", [{}])[0]
    text = str(attachment.get("text", ""))
    if f"pod {run.worker}," not in text or alert not in text or f"pool {pool}" not in text:
        return
    if "rank dp " in text:
        run.text = min(run.text or post.received_at, post.received_at)
        if IDS.search(text):
            run.ids = min(run.ids or post.received_at, post.received_at)
            if str(attachment.get("title", "")).startswith(UPDATE_MARK):
                run.update = min(run.update or post.received_at, post.received_at)


def observe(run: Run, log: Path, hooks: WebhookRecorder, fault: str) -> None:
    """Fill ``run`` from the child's events and what the receivers got so far."""
    for e in events(log):
        if e["event"] == "fault" and run.struck is None:
            run.struck, run.worker = e["t"], e["worker"]
        if e["event"] == "crash" and e["worker"] == run.worker and run.crashed is None:
            run.crashed = e["t"]
    if run.struck is None:
        return
    info = FAULTS[fault]
    alert = SIGN[info.sign]
    for post in list(hooks.posts):
        if "/slack/" in post.path:
            observe_slack(run, post, alert, info.pool)
        elif "/pagerduty/" in post.path:
            summary = str(post.body.get("payload", {}).get("summary", ""))
            if f"{alert} " in summary and f"/{run.worker} {info.pool} pool" in summary:
                run.incidents.add(str(post.body.get("dedup_key")))
        else:
            for a in post.body.get("alerts", []):
                labels = a["labels"]
                if a["status"] == "firing" and (
                    labels["alertname"],
                    labels.get("pool"),
                    labels.get("worker"),
                ) == (alert, info.pool, run.worker):
                    run.paged = min(run.paged or post.received_at, post.received_at)


def finished(run: Run, now: float, limit: float, started: float) -> bool:
    if run.struck is None:
        return now > started + STARTUP
    if now > run.struck + limit:
        return True
    if run.paged is not None and run.ids is not None:  # and the crash seen, or 3 s without one
        return run.crashed is not None or now > run.paged + 3.0
    return run.crashed is not None and now > run.crashed + 8.0  # the window after a crash


ROW_HEAD = (
    "| case | load | struck/runs | crashed in the watch | received page before crash "
    "| received text names pool, rank, slot ids | fault -> page, wall s median / max "
    "| paged after the crash: crash -> page, s median / max | page -> text with ids, s median / max |"
    "\n|---|---|---|---|---|---|---|---|---|"
)


def row(name: str, load: float, runs: list[Run]) -> str:
    struck = [r for r in runs if r.struck is not None]
    crashed = [r for r in struck if r.crashed is not None]
    before = [r for r in struck if r.paged is not None and (r.crashed is None or r.paged < r.crashed)]
    exact = [r for r in struck if r.ids is not None]
    latency = [r.paged - r.struck for r in struck if r.paged is not None and r.struck is not None]
    # the Slack and webhook posts of one flush arrive in either order: a text 1 ms early counts 0
    ids_after = [max(0.0, r.ids - r.paged) for r in struck if r.ids is not None and r.paged is not None]
    late = [r.paged - r.crashed for r in struck if r.paged is not None and r.crashed is not None]
    late = [x for x in late if x >= 0]
    return (
        f"| {name} | {load:g}x | {len(struck)}/{len(runs)} | {len(crashed)} "
        f"| {pct(len(before), len(struck))} | {pct(len(exact), len(struck))} "
        f"| {spread(latency)} | {spread(late)} | {spread(ids_after)} |"
    )


def census_interval(pool: str) -> float:
    """The busy census interval of ``pool`` (wall s: the probe's clock is the wall clock here), the
    defaults the manifests keep: Mamba 10 s, full KV and SWA 300 s (probe/core/config.py)."""
    defaults = ProbeConfig()
    return defaults.census_interval_s if pool == "mamba" else defaults.kv_census_interval_s


UPDATE_HEAD = (
    "| case | load | paged/runs | slot ids in the first page | ids in an [UPDATE] "
    "| page -> ids received, wall s median / max | the pool's busy census interval "
    "| ids within one census interval of the page | PagerDuty incidents a run (max) |"
    "\n|---|---|---|---|---|---|---|---|---|"
)


def update_row(name: str, pool: str, load: float, runs: list[Run]) -> str:
    """Leaks and SWA: when the slot ids reach the receiver, after the first page."""
    struck = [r for r in runs if r.struck is not None and r.paged is not None]
    after = [max(0.0, r.ids - r.paged) for r in struck if r.ids is not None and r.paged is not None]
    interval = census_interval(pool)
    within = [x for x in after if x <= interval]
    first = [r for r in struck if r.ids is not None and r.update is None]
    incidents = max((len(r.incidents) for r in struck), default=0)
    return (
        f"| {name} | {load:g}x | {len(struck)}/{len(runs)} | {pct(len(first), len(struck))} "
        f"| {pct(len([r for r in struck if r.update is not None]), len(struck))} | {spread(after)} "
        f"| {interval:g} s | {pct(len(within), len(struck))} | {incidents} |"
    )


UNREACHABLE_HEAD = (
    "| variant | load | struck/runs | crashed | paged with the exact cause "
    "| within 1 s of the crash | crash -> page, wall s median / max |"
    "\n|---|---|---|---|---|---|---|"
)


def unreachable_row(runs: list[Run]) -> str:
    struck = [r for r in runs if r.struck is not None]
    crashed = [r for r in struck if r.crashed is not None]
    exact = [r for r in crashed if r.ids is not None]
    late = [r.ids - r.crashed for r in exact if r.ids is not None and r.crashed is not None]
    within = [x for x in late if x <= 1.0]
    return (
        f"| {SEED_FAULT} (busy), probe unreachable from the fault | 1x | {len(struck)}/{len(runs)} "
        f"| {len(crashed)} | {pct(len(exact), len(crashed))} | {pct(len(within), len(crashed))} "
        f"| {spread(late)} |"
    )


def progress(run: Run) -> str:
    if run.struck is None:
        return "not struck"
    paged = "not paged" if run.paged is None else f"paged {run.paged - run.struck:.2f} s after the fault"
    return f"struck, {paged}{', crashed' if run.crashed is not None else ''}"
