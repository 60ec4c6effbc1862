"""The in-process probe: exact pool accounts from inside the engine's scheduler (``docs/probe.md``).

Where things are (floors from the top; ``pyproject.toml``'s import contracts keep them):

* the engine rooms, one per engine in :mod:`poolwatch.engines`, independent of each other:
  :mod:`poolwatch.probe.sglang` (release families, readers, censuses, the last word, guard mode)
  and :mod:`poolwatch.probe.vllm` (release shapes, block-pool readers, the walk, the free-time
  tripwire).  Each hands the neutral probe one spec (``<room>.engine``: ``SGLANG``, ``VLLM``);
* :mod:`poolwatch.probe.lifecycle`: activation (each engine's plugin, the ``.pth`` file) and
  ``install`` / ``attach`` / ``detach`` / ``uninstall`` / ``probe_of`` for any engine;
* :mod:`poolwatch.probe.endpoint`: the loopback HTTP endpoint and its publisher (discovery file,
  the node's secret, the idle keepalive);
* :mod:`poolwatch.probe.core`: the engine seam (``engine.py``), the probe every engine shares
  (``probe.py``), the census schedule, settings, reading foreign objects without raising,
  containment, publication, the kill switch; :mod:`poolwatch.probe.census`: the pure proofs.

Neutral packages never import an engine room; nothing here imports torch at import time.
"""
