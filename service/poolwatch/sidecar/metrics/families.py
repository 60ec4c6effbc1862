"""Catalogue-checked samples of one collect() call, and the prometheus_client family of a metric.

Every collector of the sidecar adds its samples to a :class:`Families`, which refuses a name not
given to it (the names come from :mod:`poolwatch.catalog.metrics`), so a collector cannot emit a metric
that is not in the catalogue.  A :class:`FamiliesCollector` is such a collector: it names its families
and fills a fresh :class:`Families` on every collect.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from poolwatch.catalog.metrics import by_name
from poolwatch.catalog.spec import Kind

__all__ = ["Families", "FamiliesCollector", "Sample", "metric_family"]

Sample = tuple[str, tuple[str, ...], float]  # (catalogue name, label values, value)


def metric_family(name: str) -> GaugeMetricFamily | CounterMetricFamily:
    """An empty family of the catalogue metric ``name``."""
    spec = by_name(name)
    if spec.kind is Kind.COUNTER:
        return CounterMetricFamily(spec.name.removesuffix("_total"), spec.help, labels=spec.labels)
    return GaugeMetricFamily(spec.name, spec.help, labels=spec.labels)


class Families:
    """Catalogue-checked samples for one collect() call, emitted in catalogue order.

    The samples are kept as plain tuples (``samples``) and turned into prometheus_client
    families only when iterated, so the cached exposition (:mod:`.exposition`) can take them
    without building a family it will not use."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)
        self._known = frozenset(self.names)
        self.samples: list[Sample] = []

    def add(self, name: str, labels: Sequence[str], value: float) -> None:
        if name not in self._known:
            raise KeyError(name)
        self.samples.append((name, tuple(labels), value))

    def __iter__(self) -> Iterator[Metric]:
        families = {name: metric_family(name) for name in self.names}
        for name, labels, value in self.samples:
            families[name].add_metric(list(labels), value)
        return iter(families.values())


class FamiliesCollector(Collector):
    """A collector of the catalogue families ``names``: ``describe()`` yields them empty, ``collect()``
    a fresh :class:`Families` that :meth:`fill` adds this scrape's samples to."""

    names: tuple[str, ...] = ()  # its families, in exposition order

    def describe(self) -> Iterator[Metric]:
        return iter(Families(self.names))

    def collect(self) -> Iterator[Metric]:
        fam = Families(self.names)
        self.fill(fam)
        return iter(fam)

    def fill(self, fam: Families) -> None:
        raise NotImplementedError
