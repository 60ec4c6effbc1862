"""The engine selector of both dashboards: one ``$engine`` variable that every panel query obeys.

Only ``poolwatch_worker_info`` carries the ``engine`` label (``sglang`` or ``vllm``; a static fact of
the rank, like its model), so a query filters by engine through that info series, per series,
before any aggregation: each selector ``s`` becomes ::

    (s unless on (namespace, pod, worker, dp_rank, tp_rank, pp_rank) poolwatch_worker_info{engine!~"$engine"})

joined on the rank labels ``s`` has (a sidecar-wide series -- targets, notifications -- on its pod;
a range selector is filtered after its ``rate``/``increase``).  ``unless`` of the *other* engines
rather than ``and`` of the chosen one: with All selected (``.*``) the right side is empty and every
query is exactly what it was, a rank whose engine is not known yet (no info series) stays visible,
and a pod's sidecar-wide series go only when the pod runs another engine.  The variables
(namespace aside) list only the chosen engines' pods, roles and workers.

:func:`engine_filtered` rewrites every panel and annotation query of a dashboard (``expr`` keys; a
variable's ``label_values`` takes a series selector, not an expression); a test proves every
selector of every query is filtered.

What a rank exports differs by engine, and the registry (:mod:`poolwatch.engines`) says how: an
engine whose pool unit is not a slot (vLLM's KV blocks) is named in every panel counted in slots
(:func:`unit_note`); an engine with no idle check of its own never exports the metrics in
:data:`IDLE_CHECK_ONLY` (its guard's refusals, counted in its unit, it does).  A panel that reads
one says so in its description (:func:`idle_check_only`) and, where it is a stat, shows a text
rather than "No data"; ``tests/artifacts/test_dashboard_vllm.py`` renders a vLLM rank's
``/metrics`` through the sidecar and checks every other rank-level query of both dashboards finds
a series there.
"""

from __future__ import annotations

import re
from typing import Any

from poolwatch.artifacts.grafana import Json, query_variable
from poolwatch.catalog.metrics import by_name
from poolwatch.catalog.spec import ALERT_LABELS
from poolwatch.engines import ENGINES, EngineEntry

__all__ = [
    "ENGINE",
    "ENGINE_INFO",
    "IDLE_CHECK_ONLY",
    "engine_filtered",
    "engine_variable",
    "filter_expr",
    "idle_check_only",
    "other_engines",
    "unit_note",
]

ENGINE = 'engine=~"$engine"'  # the matcher of the variables that list ranks
ENGINE_INFO = 'poolwatch_worker_info{engine!~"$engine"}'  # the ranks of the engines not chosen
_RANK_JOIN = ("worker", "dp_rank", "tp_rank", "pp_rank")
# metrics a rank exports only when its engine has an idle check of its own (EngineEntry.idle_check),
# and what they read (a test checks both ways against a vLLM rank's /metrics)
IDLE_CHECK_ONLY: dict[str, str] = {
    "poolwatch_idle_check_strict": "own idle check",
}
_SEL = r"(?:poolwatch_[a-z0-9_]+|ALERTS|up)(?:\{[^}]*\})?"
# a range selector inside its function call, or an instant selector (not followed by ``{``, ``[``
# or more of a name, so a shortened name or a brace-less prefix never matches)
_SELECTOR = re.compile(
    rf"(?<![\w:\"])(?:(?P<call>[a-z_]+\((?P<range>{_SEL})\[[^\]]+\]\))|(?P<instant>{_SEL})(?![\[{{\w(]))"
)


def unit_note(entries: tuple[EngineEntry, ...] = ENGINES) -> str:
    """Said by every panel counted in slots: the unit is one, the engines' words for it are not."""
    return " ".join(
        f"{e.title}'s pool (full) counts KV-cache {e.unit}s: a slot there is one {e.unit}."
        for e in entries
        if e.unit != "slot"
    )


def idle_check_only(metric: str, entries: tuple[EngineEntry, ...] = ENGINES) -> str:
    """The sentence a panel reading ``metric`` carries: what a rank of an engine without an idle
    check of its own shows there, and why."""
    having = " and ".join(e.title for e in entries if e.idle_check)
    lacking = " or ".join(e.title for e in entries if not e.idle_check)
    reason = f"{having}'s {IDLE_CHECK_ONLY[metric]}; {lacking} has none"
    return f"{having} only ({reason}): nothing for a {lacking} rank."


def engine_variable() -> Json:
    """``$engine``: the engines the namespaces' ranks run (All: every one, and ranks not yet known)."""
    return query_variable(
        "engine", "Engine", 'label_values(poolwatch_worker_info{namespace=~"$namespace"}, engine)'
    )


def _join_labels(selector: str, cluster_label: str) -> tuple[str, ...]:
    name = selector.split("{", 1)[0]
    if name == "ALERTS":
        labels: tuple[str, ...] = ALERT_LABELS
    elif name == "up":
        labels = ()
    else:
        labels = by_name(name).labels
    cluster = (cluster_label,) if cluster_label else ()
    return (*cluster, "namespace", "pod", *(lbl for lbl in _RANK_JOIN if lbl in labels))


def other_engines(selector: str, cluster_label: str = "") -> str:
    """``unless ...``: drops the series of ``selector`` whose rank (or pod) runs an engine not chosen."""
    return f"unless on ({', '.join(_join_labels(selector, cluster_label))}) {ENGINE_INFO}"


def filter_expr(expr: str, cluster_label: str = "") -> str:
    """``expr`` with every selector filtered by ``$engine`` (see the module docstring)."""

    def wrap(m: re.Match[str]) -> str:
        whole = m.group(0)
        selector = m.group("range") or m.group("instant")
        return f"({whole} {other_engines(selector, cluster_label)})"

    return _SELECTOR.sub(wrap, expr)


def _walk(node: Any, cluster_label: str) -> Any:
    if isinstance(node, dict):
        return {
            k: filter_expr(v, cluster_label)
            if k == "expr" and isinstance(v, str)
            else _walk(v, cluster_label)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_walk(v, cluster_label) for v in node]
    return node


def engine_filtered(doc: Json, cluster_label: str = "") -> Json:
    """``doc`` with every panel and annotation query filtered by ``$engine``."""
    out: Json = _walk(doc, cluster_label)
    return out
