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
from typing import Any

from poolwatch.model.findings import LEAK_KINDS
from poolwatch.sidecar.incidents.markdown import Md, code, labelled, listed, num, offset, table, when, whole

__all__ = ["LEFT_OUT", "bundle_json", "bundle_markdown", "figures"]

LEFT_OUT = (
    "no prompt, token id, request text or log message (poolwatch never reads them);",
    "request ids only as the first 12 hex digits of their SHA-256;",
    "no worker, pod, namespace or instance name; a model by its last component (no directory);",
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


def _ids(finding: dict[str, Any]) -> Md:
    unit = "slot" if whole(finding["page_size"]) <= 1 else f"page of {num(finding['page_size'])} slots"
    shown = listed(finding["ids"]) if finding["ids"] else "none named"
    count = num(finding["count"])
    if finding["record"] == "repair":
        return Md(f"{unit} ids of the last action: {shown} ({count} slots in all)")
    named = len(finding["ids"]) if isinstance(finding["ids"], list) else 0
    more = whole(finding["count"]) > named
    return Md(f"{unit} ids {shown}" + (f" (the first {named} of {count})" if more else ""))


def _rank(rank: Any) -> Md:
    if not isinstance(rank, dict):
        return code(rank)
    return Md(f"dp{num(rank.get('dp'))} tp{num(rank.get('tp'))} pp{num(rank.get('pp'))}")


def _head(body: dict[str, Any]) -> list[str]:
    f, e = body["finding"], body["engine"]
    what = "guard action" if f["record"] == "repair" else "finding"
    rows = [
        ["what", Md(f"{what} {code(f['kind'])} in the {code(f['pool'])} pool: {num(f['count'])} in all")],
        ["ids", _ids(f)],
        [
            "first seen",
            Md(f"{when(body['first_seen_at'])}, after {code(f['hook'])}, iteration {num(f['seq'])}"),
        ],
        ["last seen", Md(f"{when(body['last_seen_at'])} (in {num(body['times_seen'])} snapshots)")],
        ["requests (hashed)", listed(f["requests"]) if f["requests"] else Md("none known")],
    ]
    if isinstance(f.get("last_action"), dict):
        last = f["last_action"]
        rows.append(["last action", Md(f"after {code(last.get('hook'))}, iteration {num(last.get('seq'))}")])
    title = f"# poolwatch incident {code(body['id'], table=False)}"
    release = code(e["release"], table=False) if e["release"] else "(release unknown)"
    lead = (
        f"{code(f['kind'], False)} in the {code(f['pool'], False)} pool of {code(e['engine'], False)} "
        f"{release}, {code(e['role'], False)} rank {_rank(e['rank'])}."
    )
    return [title, "", lead, "", *table(["", ""], labelled(rows))]


def _call_site(body: dict[str, Any]) -> list[str]:
    site = body["call_site"]
    out = ["", "## The line that freed it", ""]
    if not isinstance(site, dict) or not site.get("frames"):
        return [*out, _NO_SITE]
    leak = site["kind"] == "hook" and body["finding"]["kind"] in _LEAKS
    said = _KIND_SAYS.get(site["kind"], _KIND_SAYS["hook"]).replace("{seq}", num(site.get("seq")))
    out.append(_LEAK_SAYS if leak else said)
    out.append("")
    rows = [
        [n, code(f["file"]), num(f["line"]), code(f["function"])] for n, f in enumerate(site["frames"], 1)
    ]
    out += table(["#", "file", "line", "function"], rows)
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
        [code(a["kind"]), a["count"], listed(a["ids"], 16), code(a["hook"]), a["seq"]] for a in g["actions"]
    ]
    return [*out, "", *table(["action", "slots in all", "last ids", "last after", "iteration"], rows)]


def _engine(body: dict[str, Any]) -> list[str]:
    e = body["engine"]
    release = code(e["release"]) if e["release"] else Md("unknown")
    if e["release"] and not e["release_verified"]:
        release = Md(release + " (a release poolwatch never read: read as its nearest family, unverified)")
    strict = {True: "on", False: "off"}.get(e["idle_check_strict"], "unknown")
    rows = [
        ["engine", code(e["engine"])],
        ["release", release],
        ["model", code(e["model"]) if e["model"] else Md("unknown")],
        ["role", code(e["role"])],
        ["rank", _rank(e["rank"])],
        [
            "ranks of this worker the sidecar saw",
            listed(e["ranks_seen"]) if e["ranks_seen"] else Md("this one"),
        ],
        ["strict idle check", Md(strict)],
        ["source", code(e["source"])],
    ]
    return ["", "## Engine and rank", "", *table(["", ""], labelled(rows))]


def _figures(body: dict[str, Any]) -> list[str]:
    rows = []
    for label, m in figures(body).items():
        if m is None:
            continue
        for pool, a in m["pools"].items():
            rows.append(
                [code(pool), Md(label), m["seq"], code(m["phase"]), *(a[s] for s in _STATES), a["gap"]]
            )
    head = ["pool", "moment", "iteration", "phase", *(s.replace("_", " ") for s in _STATES), "gap"]
    return ["", "## Pools before, at and after", "", *table(head, rows), "", _GAP]


def _found(items: Any) -> Md:
    if not isinstance(items, list):
        return code(items)
    return Md(", ".join(f"{code(t['kind'])} {code(t['pool'])} x{num(t['count'])}" for t in items))


def _timeline(body: dict[str, Any]) -> list[str]:
    start = body["first_seen_at"]
    rows = []
    for m in body["moments"]:
        gaps = ", ".join(f"{code(p)} {num(a['gap'])}" for p, a in m["pools"].items())
        queues = ", ".join(f"{code(k)} {num(v)}" for k, v in m["queues"].items())
        found = [_found(m["tripwires"]), _found(m["repairs"])]
        rows.append([offset(m["taken_at"], start), m["seq"], code(m["phase"]), Md(queues), Md(gaps), *found])
    head = ["t (s)", "iteration", "phase", "queues", "gaps", "findings", "guard actions"]
    return [
        "",
        "## The rank around it",
        "",
        "Snapshots as the sidecar received them; t from the first sighting.",
        "",
        *table(head, rows),
    ]


def _json_block(doc: Any) -> list[str]:
    """A fenced JSON block no string in ``doc`` can close (a backtick is written ``\\u0060``)."""
    text = json.dumps(doc, indent=1, sort_keys=True).replace("`", "\\u0060")
    return ["```json", text, "```"]


def _poolwatch(body: dict[str, Any]) -> list[str]:
    p = body["poolwatch"]
    out = ["", "## poolwatch", "", f"Version {code(p['version'], False)}."]
    if body["probe"] is not None:
        out += ["", "Probe health:", "", *_json_block(body["probe"])]
    out += ["", "Sidecar settings (redacted):", "", *_json_block(p["settings"])]
    return out


def _cut(body: dict[str, Any]) -> list[str]:
    """What was shed to fit the incidents file (:mod:`~poolwatch.sidecar.incidents.fit`)."""
    cut = body.get("cut")
    if not isinstance(cut, dict) or not cut:
        return []
    said = ", ".join(f"{num(n)} {code(what, False)}" for what, n in sorted(cut.items(), key=str))
    return ["", "## Cut to fit the sidecar's incidents file", "", f"Left out of this record: {said}."]


def bundle_markdown(body: dict[str, Any]) -> str:
    """The Markdown page of the bundle (what a maintainer reads first).  Every value from the body
    is inert inline code or a figure (:func:`_code`), so a body from a hostile sidecar or file
    cannot add a heading, a link or a control character to the page."""
    parts = [_head(body), _call_site(body), _guard(body), _engine(body), _figures(body), _timeline(body)]
    parts += [_poolwatch(body), _cut(body)]
    parts.append(["", "## Left out of this bundle", "", *(f"- {line}" for line in LEFT_OUT)])
    return "\n".join(line for part in parts for line in part) + "\n"
