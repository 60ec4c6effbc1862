"""The sidecar: everything ``poolwatch serve`` wires together around the pure core.

``app`` (:func:`create_app`, the lifespan that owns the HTTP client and background tasks),
``scraper`` (the scrape loop over :mod:`poolwatch.sources`), ``store`` (latest snapshot, history
and target health per rank), ``exporter`` and ``alert_collector`` (``/metrics``), ``api`` and
``alerts_api`` (``/api/v1``), ``alerting`` (detector + notifiers + evaluation timer) and
``persist`` (firing alerts across restarts).  Data flows one way::

    sources -> scraper -> store -> detector (poolwatch.detect) / exporter -> notify / API
"""
