"""Every metric poolwatch exports, as data.

This catalogue is the single source for the collectors (which refuse to emit a name that is not
here), the README's metric table, the dashboards and the Prometheus rules (whose tests fail when
they name a metric that is not here).  Names follow Prometheus conventions: ``poolwatch_`` prefix,
base units (``_slots``, ``_seconds``), ``_total`` for counters, no colons.

The entries' shape and label sets are in :mod:`poolwatch.catalog.spec`.  :data:`CATALOG` lists
the watched ranks' metrics first (one series per rank and pool), then the sidecar's own (targets,
alerts, process), then the standard ``process_*`` families of client_python's process collector.
"""

from __future__ import annotations

from poolwatch.catalog.ranks import RANKS
from poolwatch.catalog.sidecar import SIDECAR
from poolwatch.catalog.spec import MetricSpec

__all__ = ["CATALOG", "by_name", "markdown_table"]

# the watched ranks' metrics first, then the sidecar's own (targets, alerts, process, process_*)
CATALOG: tuple[MetricSpec, ...] = (*RANKS, *SIDECAR)


def by_name(name: str) -> MetricSpec:
    """The spec of ``name`` (a counter may be named with or without ``_total``)."""
    for spec in CATALOG:
        if name in (spec.name, spec.name.removesuffix("_total")):
            return spec
    raise KeyError(f"metric {name!r} is not in poolwatch's catalogue")


def markdown_table() -> str:
    """The README's metric table."""
    rows = ["| metric | type | labels | meaning |", "|---|---|---|---|"]
    for s in CATALOG:
        labels = ", ".join(f"`{lbl}`" for lbl in s.labels)
        rows.append(f"| `{s.name}` | {s.kind.value} | {labels} | {s.help} |")
    return "\n".join(rows)
