"""The busy sample interval paced to the sample budget (``poolwatch.probe.core.pacing``), and the
probe sampling at that pace on a fake engine."""

from __future__ import annotations

from typing import Any

from poolwatch.probe.core.pacing import MAX_INTERVAL_S, WINDOW, SamplePacer


def paced_probe(now: list[float], each_s: float) -> tuple[Any, Any]:
    """A probe on a fake SGLang rank at a 0.1 s interval and a 0.1 % budget, every sample costing
    ``each_s`` to the pacer, on the clock ``now[0]``; with its scheduler (to detach)."""
    from dataclasses import replace

    from poolwatch.probe.core.config import ProbeConfig
    from poolwatch.probe.lifecycle import attach
    from poolwatch.probe.sglang.engine import SGLANG
    from rigs.fakes.sglang import Rank, Scheduler

    config = ProbeConfig(serve=False, directory="/nonexistent-poolwatch-test-dir", release="0.5.4.post1")
    rank = Rank()
    sched = Scheduler(rank.alloc, rank.rows, rank.tree, max_total_num_tokens=64)
    paced = replace(config, sample_interval_s=0.1, sample_budget=0.001)
    probe = attach(SGLANG, sched, paced, clock=lambda: now[0])
    pacer = probe.pacer
    pacer.record = lambda cost_s: SamplePacer.record(pacer, each_s)  # type: ignore[method-assign]
    return probe, sched


def test_a_cheap_sample_keeps_the_configured_interval() -> None:
    pacer = SamplePacer(0.1, 0.001)
    pacer.record(50e-6)  # 50 us / 0.1 % = 50 ms: under the configured 100 ms
    assert pacer.current_s == 0.1


def test_a_dear_sample_stretches_the_interval_to_the_budget() -> None:
    pacer = SamplePacer(0.1, 0.001)
    for _ in range(WINDOW):
        pacer.record(400e-6)
    assert abs(pacer.current_s - 0.4) < 1e-9  # 400 us every 0.4 s: 0.1 % of the thread


def test_one_slow_sample_does_not_stretch_it_but_a_slow_run_does() -> None:
    pacer = SamplePacer(0.1, 0.001)
    for cost in (100e-6, 100e-6, 100e-6, 0.05):  # a garbage collection in one sample
        pacer.record(cost)
    assert pacer.current_s == 0.1
    for _ in range(WINDOW):
        pacer.record(600e-6)
    assert abs(pacer.current_s - 0.6) < 1e-9


def test_the_interval_never_passes_the_ceiling() -> None:
    pacer = SamplePacer(0.1, 0.001)
    for _ in range(WINDOW):
        pacer.record(0.5)  # a huge batch: 0.5 s a sample
    assert pacer.current_s == MAX_INTERVAL_S


def test_an_interval_of_zero_or_a_budget_of_zero_turns_pacing_off() -> None:
    for pacer in (SamplePacer(0.0, 0.001), SamplePacer(0.1, 0.0)):
        for _ in range(WINDOW):
            pacer.record(0.01)
        assert pacer.current_s == pacer.interval_s


def test_a_configured_interval_above_the_ceiling_is_kept() -> None:
    pacer = SamplePacer(5.0, 0.001)
    pacer.record(0.001)
    assert pacer.current_s == 5.0


def test_a_busy_probe_samples_at_the_paced_interval_and_an_idle_hook_at_once() -> None:
    from poolwatch.probe.lifecycle import detach

    now = [0.0]
    probe, sched = paced_probe(now, 400e-6)  # 400 us each
    pacer = probe.pacer
    try:
        sampled = []
        for _ in range(40):  # a hook every 0.1 s of the fake clock
            now[0] += 0.1
            before = probe.guard.samples_total
            probe.step("on_loop_boundary")
            sampled.append(probe.guard.samples_total > before)
        assert abs(pacer.current_s - 0.4) < 1e-9
        assert sum(sampled[10:]) in (7, 8)  # every fourth hook once paced: 0.1 % of the thread
        now[0] += 0.1
        before = probe.guard.samples_total
        probe.idle("on_idle", fresh=True)  # the first idle hook after work: sampled at once
        assert probe.guard.samples_total == before + 1
    finally:
        detach(sched)


def test_bursts_shorter_than_the_paced_interval_are_still_sampled_busy() -> None:
    """The first idle sample after each burst is taken at once; it must not restart the busy clock,
    or bursts shorter than the paced interval would only ever be sampled idle (a real vLLM server's
    held blocks never exported)."""
    from poolwatch.probe.lifecycle import detach

    now = [0.0]
    probe, sched = paced_probe(now, 1.5e-3)  # paced to 1.5 s
    pacer = probe.pacer
    try:
        busy = 0
        for _ in range(12):  # bursts of 1 s (10 steps), each followed by one idle iteration
            for _ in range(10):
                now[0] += 0.1
                before = probe.guard.samples_total
                probe.step("on_loop_boundary")
                busy += probe.guard.samples_total > before
            now[0] += 0.05
            before = probe.guard.samples_total
            probe.idle("on_idle", fresh=True)
            assert probe.guard.samples_total == before + 1  # the idle hook after work: at once
        assert abs(pacer.current_s - 1.5) < 1e-9
        assert 7 <= busy <= 9  # one busy sample every 1.5 s of the 12.6 s, whatever the idle samples
    finally:
        detach(sched)


def test_the_budget_holds_where_a_cold_sglang_sample_costs_most_at_256_live_requests() -> None:
    pacer = SamplePacer(0.1, 0.0005)
    for _ in range(WINDOW):
        pacer.record(1.9e-3)  # the costliest median in SGLang's loop at 256 live (docs/benchmarks.md)
    assert abs(pacer.current_s - 3.8) < 1e-9  # the ceiling does not bind: the samples take the budget
