"""PoolwatchSchedulerCrashed names the exception the scheduler died of (the last line of the
traceback), not only "Scheduler hit an exception"."""

from __future__ import annotations

from dataclasses import replace

from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.families.incidents import LoggedIncidents, raised
from poolwatch.model.rank import IncidentKind
from poolwatch.model.snapshot import Incident, Snapshot

TRACEBACK = """Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2321, in run_scheduler_process
    scheduler.event_loop_normal_disagg_prefill()
  File "/sglang/srt/managers/scheduler_runtime_checker_mixin.py", line 80, in check_memory
    raise ValueError(msg)
[2026-11-30 10:00:01 TP1] Decode batch, #running-req: 3, #token: 512
ValueError: token_to_kv_pool_allocator memory leak detected! full_num_used=0, mamba_num_used=1
mamba_available_size=95"""


def test_the_exception_is_the_last_unindented_error_line() -> None:
    assert raised(TRACEBACK) == (
        "ValueError: token_to_kv_pool_allocator memory leak detected! full_num_used=0, mamba_num_used=1"
    )
    assert raised("AssertionError") == "AssertionError"
    assert raised("Scheduler hit an exception: nothing more") == ""


def test_the_crash_alert_says_what_was_raised(seed_snapshot: Snapshot) -> None:
    now = seed_snapshot.taken_at
    crash = Incident(IncidentKind.SCHEDULER_EXCEPTION, TRACEBACK, now)
    (signal,) = LoggedIncidents(DetectorConfig()).signals(replace(seed_snapshot, incidents=(crash,)), now)
    assert signal.alert == "PoolwatchSchedulerCrashed"
    assert "died: ValueError: token_to_kv_pool_allocator memory leak detected!" in signal.description
    assert "(Scheduler hit an exception: Traceback (most recent call last):)" in signal.description
