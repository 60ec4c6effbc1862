"""The one catalogue of metrics, the source of the collectors, docs, dashboards and rules.  Public
face: :mod:`poolwatch.catalog.metrics` (``CATALOG``, ``by_name``)."""
