"""Supervision of the sidecar's background tasks: none of them dies silently.

Every long-running task (the scrape loop, the evaluation timer, one deliverer per receiver) runs
under :meth:`Supervisor.start`.  When its coroutine raises, the crash is logged with its cause --
once per distinct error, so a crash loop does not flood the log -- counted
(``poolwatch_task_crashes_total{task}``), and the task is started again after a backoff that
doubles from :data:`MIN_BACKOFF_S` to :data:`MAX_BACKOFF_S` (reset once a run lasts a minute).
A task with :data:`LOOP_CRASHES` crashes within :data:`LOOP_WINDOW_S` is *crash-looping*:
``poolwatch_task_crash_looping{task}`` is 1, ``/readyz`` says so, and PoolwatchTaskCrashLooping
fires.  The supervisor also counts the other failures that must not stop anything
(``poolwatch_internal_errors_total{what}``: a state file that could not be written or was set
aside as corrupt).

Sample exposition::

    poolwatch_task_crashes_total{task="poolwatch-alert-timer"} 4.0
    poolwatch_task_crash_looping{task="poolwatch-alert-timer"} 1.0
    poolwatch_internal_errors_total{what="state_file_write"} 12.0
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable

from poolwatch.sidecar.metrics.families import Families, FamiliesCollector

__all__ = ["LOOP_CRASHES", "LOOP_WINDOW_S", "Supervisor", "SupervisorCollector"]

MIN_BACKOFF_S = 1.0
MAX_BACKOFF_S = 60.0
HEALTHY_RUN_S = 60.0
LOOP_CRASHES = 3
LOOP_WINDOW_S = 300.0
log = logging.getLogger("poolwatch.sidecar")
Sleep = Callable[[float], Awaitable[None]]


class Supervisor:
    def __init__(self, *, clock: Callable[[], float] = time.monotonic, sleep: Sleep = asyncio.sleep) -> None:
        self._clock, self._sleep = clock, sleep
        self.crashes: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self._recent: dict[str, deque[float]] = {}
        self._last_error: dict[str, str] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def start(self, name: str, run: Callable[[], Awaitable[None]]) -> asyncio.Task[None]:
        """Run ``run()`` as task ``name``; restart it with backoff whenever it raises."""
        self.crashes.setdefault(name, 0)
        task = asyncio.create_task(self._keep(name, run), name=name)
        self._tasks[name] = task
        return task

    def error(self, what: str) -> None:
        """Count a failure that must not stop anything (it is logged where it happened)."""
        self.errors[what] += 1

    def crash_looping(self) -> list[str]:
        """The tasks with at least ``LOOP_CRASHES`` crashes in the last ``LOOP_WINDOW_S``."""
        now = self._clock()
        return sorted(
            n for n, d in self._recent.items() if sum(now - t <= LOOP_WINDOW_S for t in d) >= LOOP_CRASHES
        )

    async def stop(self, timeout: float = 2.0) -> None:
        """Cancel every task and wait for them at most ``timeout`` seconds in all."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
        self._tasks.clear()

    async def _keep(self, name: str, run: Callable[[], Awaitable[None]]) -> None:
        backoff = MIN_BACKOFF_S
        while True:
            started = self._clock()
            try:
                await run()
                return  # a task that ends by itself is done
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._crashed(name, exc)
            backoff = MIN_BACKOFF_S if self._clock() - started >= HEALTHY_RUN_S else backoff
            await self._sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    def _crashed(self, name: str, exc: Exception) -> None:
        self.crashes[name] += 1
        recent = self._recent.setdefault(name, deque(maxlen=LOOP_CRASHES))
        recent.append(self._clock())
        error = f"{type(exc).__name__}: {exc}"[:300]
        if self._last_error.get(name) != error:  # once per distinct cause, with its traceback
            self._last_error[name] = error
            log.error(
                "event=task_crashed task=%s crashes=%d error=%s",
                name,
                self.crashes[name],
                error,
                exc_info=exc,
            )


_NAMES = ("poolwatch_task_crashes_total", "poolwatch_task_crash_looping", "poolwatch_internal_errors_total")


class SupervisorCollector(FamiliesCollector):
    """Crashes and crash loops by task, and contained internal errors by kind."""

    names = _NAMES

    def __init__(self, supervisor: Supervisor) -> None:
        self._supervisor = supervisor

    def fill(self, fam: Families) -> None:
        looping = set(self._supervisor.crash_looping())
        for name, n in sorted(self._supervisor.crashes.items()):
            fam.add("poolwatch_task_crashes_total", (name,), n)
            fam.add("poolwatch_task_crash_looping", (name,), float(name in looping))
        for what, n in sorted(self._supervisor.errors.items()):
            fam.add("poolwatch_internal_errors_total", (what,), n)
