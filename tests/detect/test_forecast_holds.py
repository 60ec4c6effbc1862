"""The exhaustion forecast counts what stranded holds keep: a vLLM decode whose prefills died keeps
each aborted request's blocks (``session_held``: the books balance, the gap stays 0), and the pool
runs out all the same.  Holds within their bound (transfers coming and going) are not lost capacity."""

from __future__ import annotations

from dataclasses import replace

from tests.detect.streams import WORKER, RankStream, exact

from poolwatch.conservation import findings
from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.detector import Detector
from poolwatch.detect.families.forecast import POOL_EXHAUSTION_FORECAST
from poolwatch.model.holds import Hold, Holder, HoldReason
from poolwatch.model.progress import Progress
from poolwatch.model.rank import Pool
from poolwatch.model.snapshot import Snapshot
from rigs.fakes.clock import FakeClock

VLLM = replace(WORKER, engine="vllm")
CFG = DetectorConfig()


def hold(owners: list[tuple[str, float]], blocks: int, at: float) -> Hold:
    """``owners`` (id, since), each listing ``blocks``, oldest first."""
    named = tuple(Holder(o, blocks, since, aborted=True) for o, since in owners[:8])
    return Hold(Pool.FULL, HoldReason.KV_RECV, blocks * len(owners), len(owners), owners[0][1], 480.0, named)


def snap(stream: RankStream, owners: list[tuple[str, float]], blocks: int) -> Snapshot:
    s = stream.next(exact(Pool.FULL, 0, available=3000, held=1000 + blocks * len(owners)))
    holds = (hold(owners, blocks, s.taken_at),) if owners else ()
    return replace(s, holds=holds, progress=Progress())


def test_aborted_requests_stranded_one_by_one_forecast_exhaustion_with_the_gap_at_zero() -> None:
    clock = FakeClock()
    stream = RankStream(clock, worker=VLLM, strict=None, step=5.0)
    detector = Detector(CFG, clock)
    owners: list[tuple[str, float]] = []
    fired = []
    for i in range(400):  # 2,000 s: a request stranded every 20 s, 32 blocks each
        if i % 4 == 0:
            owners.append((f"req-{i}", clock.now))
        s = snap(stream, owners, 32)
        detector.observe(s)
        assert all(f.gap == 0 for f in findings(s).values())
        fired += [a for a in detector.evaluate() if a.name == POOL_EXHAUSTION_FORECAST]
    assert fired, "a pool losing 1.6 blocks a second to stranded holds must forecast its exhaustion"
    text = fired[-1].annotations["description"]
    assert "held by owners waiting past their bound" in text
    [trend] = [t for t in detector.trends() if t.pool is Pool.FULL]
    assert 1.2 < trend.trend.rate < 2.0  # 32 blocks / 20 s


def test_transfers_within_their_bound_are_not_lost_capacity() -> None:
    clock = FakeClock()
    stream = RankStream(clock, worker=VLLM, strict=None, step=5.0)
    detector = Detector(CFG, clock)
    for i in range(400):  # a growing queue of young transfers, each done within 60 s
        owners = [(f"req-{j}", clock.now - 5.0 * (i - j)) for j in range(max(0, i - 11), i + 1)]
        detector.observe(snap(stream, owners, 32))
        assert [a for a in detector.evaluate() if a.name == POOL_EXHAUSTION_FORECAST] == []
