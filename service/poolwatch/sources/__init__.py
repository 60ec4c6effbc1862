"""Sources of snapshots, one per target, one kind per module: the probe's endpoint
(``probe_source.py``, found in the discovery directory by ``probe_dir.py``), a snapshot file
(``file.py``), a final snapshot a dying rank left (``final.py``), and each engine's own ``/metrics``
and log, read by that engine's room (``sglang/``, ``vllm/``; its kinds are ``<engine>-metrics`` and
``<engine>-log``, listed in :mod:`poolwatch.engines`) through :mod:`~poolwatch.sources.engine`.

:class:`~poolwatch.sources.targets.TargetSet` keeps the current sources (``current()`` is asked
every scrape cycle: targets come and go); the static targets -- flags, ``POOLWATCH_*`` and the
targets file -- are :mod:`~poolwatch.sources.target_config`'s, which raises ``ConfigError`` for a
bad one.
"""
