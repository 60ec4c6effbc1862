"""When a hold is stranded: the stranded-hold family's thresholds
(:mod:`poolwatch.detect.families.holds` declares them as its own), which the exhaustion forecast
and the detector's leak trend read as well -- a hold's owners past their bound are capacity lost as
surely as a leak's, though the books count them.  Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.thresholds import Thresholds, threshold
from poolwatch.model.holds import Hold
from poolwatch.model.rank import Pool
from poolwatch.model.snapshot import Snapshot

__all__ = ["STRANDED_HOLD", "HoldThresholds", "stranded", "stranded_slots"]

STRANDED_HOLD = "PoolwatchStrandedHold"


@dataclass(frozen=True, slots=True)
class HoldThresholds(Thresholds):
    """When a hold is stranded, and from how much it pages."""

    hold_grace: float = threshold(
        60.0,
        "seconds past the engine's own bound on a KV transfer or lock wait before its capacity counts "
        "as stranded",
    )
    hold_default: float = threshold(600.0, "seconds a hold may wait where the engine has no bound of its own")
    hold_limit: float = threshold(
        0.0, "seconds every hold may wait, whatever the engine's bound (0: the engine's bound and the grace)"
    )
    hold_min_slots: int = threshold(1, "a stranded hold pages only from this many slots (vLLM: blocks)")

    def bound(self, timeout: float | None) -> float:
        """Seconds a hold's oldest owner may wait: the engine's bound (``timeout``) and the grace."""
        own = self.hold_default if timeout is None else timeout + self.hold_grace
        return self.hold_limit if self.hold_limit > 0 else own


def stranded(snap: Snapshot, cfg: DetectorConfig) -> list[Hold]:
    """The holds of ``snap`` whose oldest owner waited past its bound, in pool and reason order."""
    return [h for h in snap.holds if h.age(snap.taken_at) > cfg.of(HoldThresholds).bound(h.timeout)]


def stranded_slots(snap: Snapshot, cfg: DetectorConfig) -> dict[Pool, int]:
    """Per pool, the slots of owners waiting past their bound: counted by the books (gap 0), yet
    lost to the exhaustion forecast as surely as a leak's."""
    t, out = cfg.of(HoldThresholds), dict[Pool, int]()
    for h in snap.holds:
        late = h.stranded(snap.taken_at, t.bound(h.timeout))
        if late:
            out[h.pool] = out.get(h.pool, 0) + late
    return out
