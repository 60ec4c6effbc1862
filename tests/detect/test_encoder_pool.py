"""vLLM's encoder cache judged by the balance family: a budget counting slots free twice (V15: the
encoder-decoder manager crediting ``num_free_slots`` at every decode step) pages a double free at once
in the budget's words; a healthy cache under load and a cache with outputs referenced stay quiet; an
idle residual is a leak in the cache's words (a warning, never a promised crash)."""

from __future__ import annotations

from dataclasses import replace

from tests.detect.streams import WORKER, RankStream, exact

from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.detector import Detector
from poolwatch.detect.families.balance import DOUBLE_FREE, SLOT_LEAK
from poolwatch.detect.schema import Severity
from poolwatch.model.rank import Exactness, Phase, Pool, PoolAccount
from rigs.fakes.clock import FakeClock

VLLM = replace(WORKER, engine="vllm")
SIZE = 2048


def encoder(free: int, freeable: int | None = None) -> PoolAccount:
    """The probe's coarse account of the cache (:mod:`poolwatch.probe.vllm.encoder`)."""
    evictable = 0 if freeable is None else max(0, freeable - free)
    return PoolAccount(Pool.ENCODER, SIZE, free, evictable, exactness=Exactness.COARSE)


def run(accounts: list[PoolAccount], phase: Phase = Phase.BUSY) -> list[tuple[str, Severity, str]]:
    clock = FakeClock()
    stream = RankStream(clock, worker=VLLM, strict=None)
    detector = Detector(DetectorConfig(), clock)
    fired: list[tuple[str, Severity, str]] = []
    for account in accounts:
        detector.observe(stream.next(exact(Pool.FULL, 0), account, phase=phase))
        for a in detector.evaluate():
            known = {(n, s) for n, s, _ in fired}
            if dict(a.labels).get("pool") == "encoder" and (a.name, a.severity) not in known:
                fired.append((a.name, a.severity, a.annotations["description"]))
    return fired


def test_a_budget_credited_at_every_decode_step_pages_a_double_free_at_once_in_the_budgets_words() -> None:
    # 1,500 slots of encoder budget, credited again at each decode step: free grows past the size
    steps = [encoder(548), encoder(548 + 1500), encoder(548 + 3000)]
    fired = run(steps)
    assert [(n, s) for n, s, _ in fired] == [(DOUBLE_FREE, Severity.CRITICAL)]
    text = fired[0][2]
    assert "encoder-cache slot" in text
    assert "admission control stops limiting encoder inputs" in text
    assert "two requests" not in text  # no block is shared: not the KV pool's words


def test_a_busy_cache_with_referenced_and_freeable_outputs_stays_quiet() -> None:
    steps = [encoder(free, min(SIZE, free + 300)) for free in (2048, 1500, 100, 0, 900, 2048)] * 20
    assert run(steps) == []


def test_slots_lost_at_idle_are_a_leak_in_the_caches_words_not_a_crash() -> None:
    fired = run([encoder(2000, 2000)] * 40, phase=Phase.IDLE)
    assert [(n, s) for n, s, _ in fired] == [(SLOT_LEAK, Severity.WARNING)]
    assert "48 encoder-cache slots" in fired[0][2]
    assert "checks nothing here" in fired[0][2]
    assert "crash" not in fired[0][2]
