"""Whether the probe directory a sidecar reads is still the one its probes announced themselves in.

The sidecar reads the directory it opened (:mod:`poolwatch.discovery.handle`), so a directory
swapped in by someone else is never read; but the swap itself must be seen, and a directory that
disappears means the ranks can no longer announce themselves or leave their last word.  After
each scan, :class:`ProbeDirectoryWatch` judges the configured path:

* ``ok``: it still names the directory opened, which passes the checks;
* ``unsafe``: it names another directory, or one someone else could write (or the held one itself
  became writable by others); the held one is still read while it exists;
* ``missing``: neither the path nor the held directory is there.

Once a probe has announced itself in the directory, ``unsafe`` and ``missing`` are exported
(``poolwatch_discovery_directory_lost{reason}``) and raise ``PoolwatchProbeDirectoryLost``; a
change of state is logged once (``event=discovery_directory state=...``).
"""

from __future__ import annotations

import logging

from poolwatch.discovery.handle import held

__all__ = ["LOST_REASONS", "ProbeDirectoryWatch"]

LOST_REASONS = ("unsafe", "missing")
log = logging.getLogger("poolwatch.sources")


class ProbeDirectoryWatch:
    def __init__(self, path: str) -> None:
        self.path = path
        self.state = ""  # "" before the first judgement
        self.had_probes = False

    def observe(self, announced: int) -> str:
        """Judge the directory after a scan that found ``announced`` probes; returns the state."""
        self.had_probes = self.had_probes or announced > 0
        state = _judge(self.path)
        if state != self.state:
            level = logging.ERROR if self.had_probes and state in LOST_REASONS else logging.INFO
            had = self.had_probes
            log.log(level, "event=discovery_directory dir=%s state=%s had_probes=%s", self.path, state, had)
        self.state = state
        return state

    def lost(self) -> dict[str, int]:
        """1 for the reason the directory that had probes is lost for, 0 for the others."""
        return {reason: int(self.had_probes and self.state == reason) for reason in LOST_REASONS}


def _judge(path: str) -> str:
    try:
        return held(path).status()
    except FileNotFoundError:
        return "missing"
    except OSError:  # unsafe when first opened, or the held directory became writable by others
        return "unsafe"
