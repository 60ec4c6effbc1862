"""The probe's kill switch, and the heartbeat snapshot it publishes while off.

The probe is off while ``POST /v1/disable`` holds (undone only by ``/v1/enable``), while a
``DISABLE`` file exists in the discovery directory (every rank on the node; removing it re-enables
them), or once its guard gave up.  While off it reads nothing from the scheduler but still
publishes a pool-less heartbeat snapshot once a second, so the kill switch stays visible
(PoolwatchProbeDegraded can fire) instead of going stale.

Only a ``DISABLE`` file of this user or root counts (:mod:`poolwatch.discovery.safety`).  Cost: one
``lstat`` of the ``DISABLE`` file a second, the scheduler thread's only I/O.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace

from poolwatch.discovery.safety import trusted_owners
from poolwatch.model.rank import Phase, WorkerId
from poolwatch.model.snapshot import ProbeHealth, Snapshot

__all__ = ["DISABLE_FILE", "HEARTBEAT_S", "KillSwitch", "heartbeat_snapshot"]

DISABLE_FILE = "DISABLE"  # in the discovery directory: every rank on the node stops
HEARTBEAT_S = 1.0  # while disabled, a pool-less snapshot this often keeps the switch visible
LOOK_EVERY_S = 1.0  # how often the DISABLE file is looked for


class KillSwitch:
    """The runtime switch and the ``DISABLE`` file of one probe (the guard's own give-up aside)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.runtime = False  # ``POST /v1/disable``
        self.file = False  # the DISABLE file exists (looked for once a second)
        self.last_look = -float("inf")
        self.last_heartbeat = -float("inf")
        self.changed: Callable[[], None] | None = None  # told when the file comes or goes

    @property
    def off(self) -> bool:
        return self.runtime or self.file

    def look(self, now: float) -> None:
        """Look for the ``DISABLE`` file, at most once every :data:`LOOK_EVERY_S`."""
        if now - self.last_look >= LOOK_EVERY_S:
            self.last_look = now
            found = _trusted_file(os.path.join(self.directory, DISABLE_FILE))
            if found is not self.file:
                self.file = found
                if self.changed is not None:
                    self.changed()

    def heartbeat_due(self, now: float) -> bool:
        return now - self.last_heartbeat >= HEARTBEAT_S


def _trusted_file(path: str) -> bool:
    """Whether ``path`` exists and is this user's or root's: a ``DISABLE`` file another local user
    planted (in a directory it made first, say) does not switch the probe off."""
    try:
        return os.lstat(path).st_uid in trusted_owners()
    except OSError:
        return False


def heartbeat_snapshot(
    last: Snapshot | None,
    identify: Callable[[], WorkerId],
    *,
    seq: int,
    taken_at: float,
    health: ProbeHealth,
    boot_id: str,
) -> Snapshot:
    """Who the probe is and that it is off, with no pool figures (nothing is read from the
    scheduler): the last snapshot's identity, else ``identify()``'s."""
    if last is None:
        last = Snapshot(
            worker=identify(), seq=seq, taken_at=0.0, phase=Phase.UNKNOWN, pools={}, source="probe"
        )
    return replace(
        last, seq=seq, taken_at=taken_at, phase=Phase.UNKNOWN, pools={}, tripwires=(),
        incidents=(), probe=health, boot_id=boot_id,
    )  # fmt: skip
