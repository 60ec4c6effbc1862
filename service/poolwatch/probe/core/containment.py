"""Error containment: the probe counts what went wrong, backs off, and finally gives up.

Nothing the probe does may raise into SGLang's scheduler.  A failed sample is counted and the
next ``2**k - 1`` opportunities are skipped (k = consecutive failures, capped), so a probe that
keeps failing costs less and less; after ``max_consecutive_errors`` it disables itself for good.
Unreadable fields inside a sample that otherwise worked are counted too but never cause a
give-up: a release whose shapes the probe does not fully know still gets partial snapshots.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from poolwatch.model.snapshot import ProbeHealth

__all__ = ["Guard"]

log = logging.getLogger("poolwatch.probe")
_MAX_BACKOFF = 1024


class Guard:
    def __init__(self, max_consecutive_errors: int) -> None:
        self.max_consecutive = max_consecutive_errors
        self.samples_total = 0
        self.errors_total = 0
        self.last_error = ""
        self.consecutive = 0
        self.skip = 0
        self.gave_up = False
        self.changed: Callable[[], None] | None = None  # told when it gives up (the probe's off flag)
        self._logged: set[str] = set()

    def allow(self) -> bool:
        """Whether to try now (False while backing off or after giving up)."""
        if self.gave_up:
            return False
        if self.skip > 0:
            self.skip -= 1
            return False
        return True

    def succeeded(self) -> None:
        self.samples_total += 1
        self.consecutive = 0

    def failed(self, where: str, exc: BaseException) -> None:
        """A whole operation failed: count, back off, maybe give up."""
        self.note(where, f"{type(exc).__name__}: {exc}")
        self.consecutive += 1
        self.skip = min(2**self.consecutive - 1, _MAX_BACKOFF)
        if self.consecutive >= self.max_consecutive and not self.gave_up:
            self.gave_up = True
            log.error(
                "poolwatch probe gave up after %d consecutive errors; last: %s",
                self.consecutive,
                self.last_error,
            )
            self._changed()

    def refuse(self, reason: str) -> None:
        """Off for good on this scheduler, for ``reason`` (a release the probe cannot read safely):
        logged once as an error; the health says disabled, with the reason as the last error."""
        self.gave_up = True
        self.errors_total += 1
        self.last_error = f"refused: {reason}"[:300]
        log.error("poolwatch probe refused on this scheduler: %s", reason)
        self._changed()

    def _changed(self) -> None:
        if self.changed is not None:
            self.changed()

    def note(self, where: str, message: str) -> None:
        """A contained error that does not stop the probe (an unreadable field)."""
        self.errors_total += 1
        self.last_error = f"{where}: {message}"[:300]
        if where not in self._logged and len(self._logged) < 64:
            self._logged.add(where)
            log.warning("poolwatch probe: %s", self.last_error)

    def health(
        self,
        *,
        sample_cost: float,
        census_cost: float,
        census_total: int,
        disabled: bool,
        tripwires_dropped: int = 0,
        guard: bool = False,
        guard_return: bool = False,
    ) -> ProbeHealth:
        return ProbeHealth(
            samples_total=self.samples_total,
            errors_total=self.errors_total,
            last_error=self.last_error,
            sample_cost_seconds=sample_cost,
            census_cost_seconds=census_cost,
            census_total=census_total,
            disabled=disabled or self.gave_up,
            tripwires_dropped=tripwires_dropped,
            guard=guard,
            guard_return=guard_return,
        )
