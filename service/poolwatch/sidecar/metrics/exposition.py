"""``/metrics`` bytes from per-rank blocks, each rendered once per snapshot and then reused.

prometheus_client validates and escapes every label of every sample on every scrape; at 1,000
ranks (some 40,000 samples) that alone took most of a second.  Here each rank's samples come from
the same code as the plain collectors (:meth:`PoolCollector.add_snapshot`), but are turned into
exposition lines with *prefixes* (``name{labels} ``) that prometheus_client's own encoder
rendered once per label set, so the bytes are identical to an uncached render:

* a rank's block (its lines of every family) is kept until its snapshot, staleness or incident
  counts change; only the age sample is formatted on every render;
* target health lines change with every scrape; they reuse the prefixes and format the values;
* the small remaining collectors (alerts, build info, the process's ``process_*`` families) go
  through prometheus_client as before.

The text format needs all lines of a family together, so a render is, family by family, the
header and then each rank's part of that family.  Both exposition formats are kept (OpenMetrics
when the scraper asks for it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from poolwatch.model.rank import IncidentKind
from poolwatch.model.snapshot import Snapshot
from poolwatch.sidecar.metrics.collectors import PoolCollector, TargetCollector
from poolwatch.sidecar.metrics.families import Families, Sample, metric_family
from poolwatch.sidecar.store import SnapshotStore

__all__ = ["CachedExposition", "Encoder"]

AGE = "poolwatch_snapshot_age_seconds"
EOF_LINE = b"# EOF\n"
ZERO = b"0.0\n"
MAX_PREFIXES = 512  # per rank or target: label sets seen (a rank has ~40)
MAX_FORMATS = 8  # (encoder, escaping, version) combinations kept
Encoder = Callable[[Collector], bytes]


class _Fixed(Collector):
    def __init__(self, metrics: Iterable[Metric]) -> None:
        self._metrics = list(metrics)

    def collect(self) -> Iterable[Metric]:
        return iter(self._metrics)


def _encode(encoder: Encoder, metrics: Iterable[Metric]) -> bytes:
    return encoder(_Fixed(metrics)).removesuffix(EOF_LINE)


def _value(value: float) -> bytes:
    """A sample value as prometheus_client writes it (``1.0``, ``1.664761e+06``, ``NaN``)."""
    return str(floatToGoString(value)).encode()  # type: ignore[no-untyped-call]


def _format_key(encoder: Encoder) -> Hashable:
    """``choose_encoder`` returns a new ``functools.partial`` per request: key by what it does."""
    keywords = getattr(encoder, "keywords", None) or {}
    return getattr(encoder, "func", encoder), tuple(sorted(keywords.items()))


class _Format:
    """One exposition format: family headers and sample prefixes, as its encoder writes them."""

    def __init__(self, encoder: Encoder) -> None:
        self.encoder = encoder
        self._headers: dict[str, bytes] = {}
        self.ranks: dict[tuple[str, str], _Lines] = {}
        self.targets: dict[tuple[str, str], _Lines] = {}

    def header(self, name: str) -> bytes:
        head = self._headers.get(name)
        if head is None:
            head = self._headers[name] = _encode(self.encoder, [metric_family(name)])
        return head

    def prefix(self, name: str, labels: tuple[str, ...]) -> bytes:
        """``name{labels} `` exactly as the encoder writes it (its value cut off)."""
        family = metric_family(name)
        family.add_metric(list(labels), 0.0)
        return _encode(self.encoder, [family]).removeprefix(self.header(name)).removesuffix(ZERO)


# stale, incident counts, restart time, each incident kind's last time: what a rank's block shows
# beyond its snapshot
_RankState = tuple[
    bool, tuple[tuple[IncidentKind, int], ...], float | None, tuple[tuple[IncidentKind, float], ...]
]


@dataclass(slots=True)
class _Lines:
    """Prefix memo of one rank or target, and (for a rank) its cached block."""

    prefixes: dict[tuple[str, tuple[str, ...]], bytes] = field(default_factory=dict)
    snap: Snapshot | None = None
    state: _RankState | None = None
    block: dict[str, list[bytes]] = field(default_factory=dict)
    age: bytes = b""  # the age sample's prefix

    def prefix(self, fmt: _Format, name: str, labels: tuple[str, ...]) -> bytes:
        prefix = self.prefixes.get((name, labels))
        if prefix is None:
            if len(self.prefixes) >= MAX_PREFIXES:
                self.prefixes.clear()
            prefix = self.prefixes[name, labels] = fmt.prefix(name, labels)
        return prefix

    def line(self, fmt: _Format, sample: Sample) -> bytes:
        name, labels, value = sample
        return b"%s%s\n" % (self.prefix(fmt, name, labels), _value(value))


class CachedExposition:
    """Renders what ``pools``, ``targets`` and then ``rest`` would, reusing each rank's block."""

    def __init__(
        self, store: SnapshotStore, pools: PoolCollector, targets: TargetCollector, rest: Sequence[Collector]
    ) -> None:
        self._store = store
        self._pools = pools
        self._targets = targets
        self._rest = CollectorRegistry()
        for collector in rest:
            self._rest.register(collector)
        self._formats: dict[Hashable, _Format] = {}
        self._lock = threading.Lock()  # renders may run on several worker threads at once
        self.rendered_ranks = 0  # blocks rendered anew (the others were reused)

    def render(self, encoder: Encoder, now: float) -> bytes:
        """The whole exposition at ``now`` in ``encoder``'s format (``choose_encoder``'s)."""
        with self._lock:
            fmt = self._format(encoder)
            parts = self._pool_part(fmt, now) + self._target_part(fmt)
            rest = encoder(self._rest)
            parts.append(rest.removesuffix(EOF_LINE))
            if rest.endswith(EOF_LINE):  # OpenMetrics: one end marker, after everything
                parts.append(EOF_LINE)
            return b"".join(parts)

    def _format(self, encoder: Encoder) -> _Format:
        key = _format_key(encoder)
        fmt = self._formats.get(key)
        if fmt is None:
            if len(self._formats) >= MAX_FORMATS:
                self._formats.clear()
            fmt = self._formats[key] = _Format(encoder)
        return fmt

    def _pool_part(self, fmt: _Format, now: float) -> list[bytes]:
        snaps = self._store.latest()
        ranks = [self._rank(fmt, snap, now) for snap in snaps]
        fmt.ranks = {(s.worker.key, s.source): r for s, r in zip(snaps, ranks, strict=True)}
        out = []
        for name in self._pools.names:
            out.append(fmt.header(name))
            if name == AGE:
                for snap, rank in zip(snaps, ranks, strict=True):
                    age = _value(max(0.0, now - snap.taken_at))
                    out.append(b"%s%s\n" % (rank.age, age))
                continue
            for rank in ranks:
                out.extend(rank.block.get(name, ()))
        return out

    def _rank(self, fmt: _Format, snap: Snapshot, now: float) -> _Lines:
        rank = fmt.ranks.get((snap.worker.key, snap.source)) or _Lines()
        restarted_at, incident_at = self._store.incident_times(snap.worker.key)
        state: _RankState = (  # what the block shows beyond the snapshot (any source may change it)
            self._pools.is_stale(snap, now),
            tuple(sorted(self._store.incident_counts(snap.worker.key).items())),
            restarted_at,
            tuple(sorted(incident_at.items())),
        )
        if rank.snap is snap and rank.state == state:
            return rank
        fam = Families(self._pools.names)
        self._pools.add_snapshot(fam, snap, now)
        rank.snap, rank.state, rank.block = snap, state, {}
        for sample in fam.samples:
            if sample[0] == AGE:
                rank.age = rank.prefix(fmt, AGE, sample[1])
            else:
                rank.block.setdefault(sample[0], []).append(rank.line(fmt, sample))
        self.rendered_ranks += 1
        return rank

    def _target_part(self, fmt: _Format) -> list[bytes]:
        fam = Families(self._targets.names)
        lines: dict[str, list[bytes]] = {name: [] for name in self._targets.names}
        memo: dict[tuple[str, str], _Lines] = {}
        for t in self._store.targets():
            entry = memo[t.name, t.source] = fmt.targets.get((t.name, t.source)) or _Lines()
            fam.samples.clear()
            self._targets.add_target(fam, t)
            for sample in fam.samples:
                lines[sample[0]].append(entry.line(fmt, sample))
        fmt.targets = memo
        return [part for name in self._targets.names for part in (fmt.header(name), *lines[name])]
