"""An incident's bundle for an upstream bug report: one JSON document and one Markdown page.  Pure.

Both are rendered from the record's body (:mod:`~poolwatch.sidecar.incidents.record`) and say the
same: what was found (kind, pool, the slot or block ids, counts, the hook and iteration where it
was first seen, the requests involved as hashes), the line of engine code that made the wrong
free (the call site, every frame), what guard did, the engine and its release, the rank's role
and place, the pools' figures before, at and after the first sighting, the rank's moments around
it, and the poolwatch version, probe health and sidecar settings (redacted).  The JSON adds the
three figures (``figures.before`` / ``at`` / ``after``) picked out of ``moments``.
"""

from __future__ import annotations

import json
import time
from typing import Any

from poolwatch.model.findings import LEAK_KINDS

__all__ = ["LEFT_OUT", "bundle_json", "bundle_markdown"]

LEFT_OUT = (
    "no prompt, token id, request text or log message (poolwatch never reads them);",
    "request ids only as the first 12 hex digits of their SHA-256;",
    "no worker, pod, namespace or instance name; a model path on disk by its last component;",
    "every URL as scheme://host:port; credentials and secret files only as <set>; files by base name.",
)
_STATES = ("size", "available", "evictable", "protected", "held", "session_held")
_NO_SITE = (
    "No engine frame was on the stack when this was found (the probe's own thread, a driver calling "
    "the engine by hand, or a probe older than call sites)."
)
_GAP = (
    "gap = size - (available + evictable + protected + held + session held): below 0 a slot is "
    "counted twice, above 0 lost."
)
_LEAKS = {k.value for k in LEAK_KINDS}
_LEAK_SAYS = (
    "A leak is made by no free: these frames say where the engine called the hook after which the "
    "census found the slots lost, not where they were lost."
)
_KIND_SAYS = {
    "free": "Captured inside the engine's free: the first frame is the line that called the free.",
    "next_free": (
        "The free had returned when the probe first looked; this is the same wrong free, caught when it "
        "was made again (iteration {seq}): the first frame is the line that called the free."
    ),
    "hook": (
        "The free had returned when the probe looked, at a scheduler hook: these frames say where the "
        "engine called that hook, not where it freed. The probe names the next identical free when it can."
    ),
}


def figures(body: dict[str, Any]) -> dict[str, Any]:
    """The rank's moments just before, at and (the latest kept) after the first sighting."""
    moments, first = body["moments"], body["first_moment"]
    return {
        "before": moments[first - 1] if first > 0 else None,
        "at": moments[first],
        "after": moments[-1] if len(moments) > first + 1 else None,
    }


def bundle_json(body: dict[str, Any]) -> dict[str, Any]:
    """The JSON bundle: the body with the before / at / after figures picked out."""
    return {**body, "figures": figures(body), "left_out": list(LEFT_OUT)}


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def _cell(value: Any) -> str:
    text = "?" if value is None else str(value)
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _code(value: Any) -> str:
    """``value`` as inline code (a backtick in it cannot close the span)."""
    return "`" + str(value).replace("`", "'") + "`"


def _table(head: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return out + ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]


def _ids(finding: dict[str, Any]) -> str:
    unit = "slot" if finding["page_size"] <= 1 else f"page of {finding['page_size']} slots"
    shown = ", ".join(str(i) for i in finding["ids"][:64]) or "none named"
    if finding["record"] == "repair":
        return f"{unit} ids of the last action: {shown} ({finding['count']} slots in all)"
    named, count = len(finding["ids"]), finding["count"]
    return f"{unit} ids {shown}" + (f" (the first {named} of {count})" if count > named else "")


def _head(body: dict[str, Any]) -> list[str]:
    f, e = body["finding"], body["engine"]
    rank = e["rank"]
    where = f"rank dp{rank['dp']} tp{rank['tp']} pp{rank['pp']}"
    what = "guard action" if f["record"] == "repair" else "finding"
    rows = [
        ["what", f"{what} {_code(f['kind'])} in the {_code(f['pool'])} pool: {f['count']} in all"],
        ["ids", _ids(f)],
        ["first seen", f"{_when(body['first_seen_at'])}, after {_code(f['hook'])}, iteration {f['seq']}"],
        ["last seen", f"{_when(body['last_seen_at'])} (in {body['times_seen']} snapshots)"],
        ["requests (hashed)", ", ".join(f["requests"]) or "none known"],
    ]
    if "last_action" in f:
        rows.append(
            ["last action", f"after {_code(f['last_action']['hook'])}, iteration {f['last_action']['seq']}"]
        )
    title = f"# poolwatch incident {body['id']}"
    release = e["release"] or "(release unknown)"
    lead = (
        f"{_code(f['kind'])} in the {_code(f['pool'])} pool of {e['engine']} {release}, {e['role']} {where}."
    )
    return [title, "", lead, "", *_table(["", ""], rows)]


def _call_site(body: dict[str, Any]) -> list[str]:
    site = body["call_site"]
    out = ["", "## The line that freed it", ""]
    if site is None or not site["frames"]:
        return [*out, _NO_SITE]
    leak = site["kind"] == "hook" and body["finding"]["kind"] in _LEAKS
    out.append(_LEAK_SAYS if leak else _KIND_SAYS[site["kind"]].format(seq=site["seq"]))
    out.append("")
    rows = [[n, _code(f["file"]), f["line"], _code(f["function"])] for n, f in enumerate(site["frames"], 1)]
    out += _table(["#", "file", "line", "function"], rows)
    out += [
        "",
        "Innermost first; the engine's own frames only (poolwatch's and other packages' are left out).",
    ]
    return out


def _guard(body: dict[str, Any]) -> list[str]:
    g = body["guard"]
    out = ["", "## Guard", ""]
    if not g["enabled"]:
        return [*out, "Guard was off: the probe only watched; nothing in the engine was changed."]
    out.append(
        "Guard was on"
        + ("" if g["return_enabled"] else ' ("return" off: a release newer than the newest read)')
        + "."
    )
    if not g["actions"]:
        return [*out, "It took no action on this pool."]
    rows = [
        [a["kind"], a["count"], ", ".join(str(i) for i in a["ids"][:16]), a["hook"], a["seq"]]
        for a in g["actions"]
    ]
    return [*out, "", *_table(["action", "slots in all", "last ids", "last after", "iteration"], rows)]


def _engine(body: dict[str, Any]) -> list[str]:
    e = body["engine"]
    release = e["release"] or "unknown"
    if e["release"] and not e["release_verified"]:
        release += " (newer than the newest release poolwatch read: read as its nearest family)"
    strict = {True: "on", False: "off", None: "unknown"}[e["idle_check_strict"]]
    rows = [
        ["engine", e["engine"]],
        ["release", release],
        ["model", e["model"] or "unknown"],
        ["role", e["role"]],
        ["rank", f"dp{e['rank']['dp']} tp{e['rank']['tp']} pp{e['rank']['pp']}"],
        ["ranks of this worker the sidecar saw", ", ".join(e["ranks_seen"]) or "this one"],
        ["strict idle check", strict],
        ["source", e["source"]],
    ]
    return ["", "## Engine and rank", "", *_table(["", ""], rows)]


def _figures(body: dict[str, Any]) -> list[str]:
    rows = []
    for label, m in figures(body).items():
        if m is None:
            continue
        for pool, a in m["pools"].items():
            rows.append([pool, label, m["seq"], m["phase"], *(a[s] for s in _STATES), a["gap"]])
    head = ["pool", "moment", "iteration", "phase", *(s.replace("_", " ") for s in _STATES), "gap"]
    return ["", "## Pools before, at and after", "", *_table(head, rows), "", _GAP]


def _timeline(body: dict[str, Any]) -> list[str]:
    start = body["first_seen_at"]
    rows = []
    for m in body["moments"]:
        gaps = ", ".join(f"{p} {'?' if a['gap'] is None else a['gap']}" for p, a in m["pools"].items())
        found = ", ".join(f"{t['kind']} {t['pool']} x{t['count']}" for t in m["tripwires"])
        done = ", ".join(f"{r['kind']} {r['pool']} x{r['count']}" for r in m["repairs"])
        queues = ", ".join(f"{k} {v}" for k, v in m["queues"].items())
        rows.append([f"{m['taken_at'] - start:+.3f}", m["seq"], m["phase"], queues, gaps, found, done])
    head = ["t (s)", "iteration", "phase", "queues", "gaps", "findings", "guard actions"]
    return [
        "",
        "## The rank around it",
        "",
        "Snapshots as the sidecar received them; t from the first sighting.",
        "",
        *_table(head, rows),
    ]


def _poolwatch(body: dict[str, Any]) -> list[str]:
    p = body["poolwatch"]
    out = ["", "## poolwatch", "", f"Version {p['version']}."]
    if body["probe"] is not None:
        out += _json_block("Probe health:", body["probe"])
    return out + _json_block("Sidecar settings (redacted):", p["settings"])


def _json_block(title: str, doc: Any) -> list[str]:
    """``title`` and ``doc`` as a fenced JSON block (keys sorted), after a blank line."""
    return ["", title, "", "```json", json.dumps(doc, indent=1, sort_keys=True), "```"]


def bundle_markdown(body: dict[str, Any]) -> str:
    """The Markdown page of the bundle (what a maintainer reads first)."""
    parts = [_head(body), _call_site(body), _guard(body), _engine(body), _figures(body), _timeline(body)]
    parts.append(_poolwatch(body))
    parts.append(["", "## Left out of this bundle", "", *(f"- {line}" for line in LEFT_OUT)])
    return "\n".join(line for part in parts for line in part) + "\n"
