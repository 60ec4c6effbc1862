"""One emulated SGLang server (a pod): its TP x DP scheduler ranks, its log and its crash.

When a rank raises, the worker logs ``Scheduler hit an exception: <traceback>`` as SGLang's
``run_scheduler_process`` does, and every rank of the worker stops (SGLang sends SIGQUIT to the
parent, which kills the whole server); ``on_crash`` callbacks then take down what the process
served (:func:`poolwatch_emulator.faces.attach_probes`: the probes' endpoints).
"""

from __future__ import annotations

import traceback
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from poolwatch.model.rank import Role
from poolwatch_emulator.build import DisaggregationMode, RankSettings
from poolwatch_emulator.clock import SimClock
from poolwatch_emulator.cluster_config import ClusterConfig
from poolwatch_emulator.logs import FileSink, LogSink, MemorySink, RankLog, rank_prefix
from poolwatch_emulator.scheduler import Abort, Scheduler
from poolwatch_emulator.versions import Release

if TYPE_CHECKING:
    from poolwatch_emulator.req import RequestSpec
    from poolwatch_emulator.transfer import Transfer

__all__ = ["Worker"]

_ROLES = {DisaggregationMode.PREFILL: Role.PREFILL, DisaggregationMode.DECODE: Role.DECODE}


class Worker:
    def __init__(
        self, name: str, mode: DisaggregationMode, config: ClusterConfig, clock: SimClock, release: Release
    ):
        self.name = name
        self.mode = mode
        self.role = _ROLES.get(mode, Role.UNIFIED).value
        self.release = release
        self.config = config
        self.sink: LogSink = FileSink(config.log_dir / f"{name}.log") if config.log_dir else MemorySink()
        self.crashed = False
        self.crash_message = ""
        self.on_crash: list[Callable[[], None]] = []  # run once, when the worker crashes
        self.ranks = [self._rank(dp, tp, clock, config) for dp in range(config.dp) for tp in range(config.tp)]

    def _rank(self, dp: int, tp: int, clock: SimClock, config: ClusterConfig) -> Scheduler:
        settings = RankSettings(
            release=self.release,
            mode=self.mode,
            shape=config.shape,
            tp_rank=tp,
            dp_rank=dp,
            tp_size=config.tp,
            dp_size=config.dp,
            chunked_prefill_size=config.chunked_prefill_size,
            decode_log_interval=config.decode_log_interval,
            idle_check_strict=config.idle_check_strict,
            speculative=config.speculative,
            disaggregation_waiting_timeout=config.waiting_timeout_s,
            decode_offload=config.decode_offload,
            encoder_cache=config.encoder_cache if self.mode is not DisaggregationMode.DECODE else None,
        )
        prefix = rank_prefix(dp_rank=dp if config.dp > 1 else None, tp_rank=tp, tp_size=config.tp)
        log = RankLog(self.sink, clock, prefix)
        seed = zlib.crc32(f"{config.seed}/{self.name}/dp{dp}".encode())  # stable across processes
        return Scheduler(settings, clock=clock, log=log, faults=config.faults, seed=seed)

    def group(self, dp: int) -> list[Scheduler]:
        return [r for r in self.ranks if r.dp_rank == dp]

    def deliver(self, dp: int, msg: RequestSpec | Abort, transfer: Transfer | None) -> None:
        """Hand a request or an abort to every TP rank of DP group ``dp``."""
        for rank in self.group(dp):
            if transfer is not None:
                rank.emu_transfers[transfer.rid] = transfer
            rank.emu_inbox.append(msg)

    def log_lines(self) -> list[str]:
        """The worker's log so far (from memory, or read back from its file)."""
        if isinstance(self.sink, MemorySink):
            return list(self.sink.lines)
        if isinstance(self.sink, FileSink):
            return self.sink.path.read_text(encoding="utf-8").splitlines()
        return []

    def queued_rids(self, dp: int) -> list[str]:
        """Requests of DP group ``dp`` that wait for admission (not yet running)."""
        r = self.group(dp)[0]
        reqs = r.waiting_queue + r.disagg_prefill_bootstrap_queue.queue
        reqs += [
            d.req for d in r.disagg_decode_prealloc_queue.queue
        ] + r.disagg_decode_prealloc_queue.retracted_queue
        return [q.rid for q in reqs]

    def step(self) -> bool:
        """One loop iteration on every rank; True when this step crashed the worker."""
        if self.crashed:
            return False
        for rank in self.ranks:
            try:
                rank.run_once()
            except Exception as exc:
                self._crash(rank, exc)
                return True
        return False

    def _crash(self, rank: Scheduler, exc: Exception) -> None:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        rank.logger.error(f"Scheduler hit an exception: {text}")
        self.crashed = True
        self.crash_message = f"{type(exc).__name__}: {exc}"
        for gone in self.on_crash:
            gone()

    def quiescent(self) -> bool:
        """Nothing queued, running or in flight on any rank (safe to skip simulated time)."""
        return all(_quiet(r) for r in self.ranks)

    def close(self) -> None:
        if isinstance(self.sink, FileSink):
            self.sink.close()


def _quiet(r: Scheduler) -> bool:
    queues = (
        r.emu_inbox,
        r.waiting_queue,
        r.running_batch.reqs,
        r.disagg_prefill_bootstrap_queue.queue,
        r.disagg_prefill_inflight_queue,
        r.disagg_decode_prealloc_queue.queue,
        r.disagg_decode_prealloc_queue.retracted_queue,
        r.disagg_decode_transfer_queue.queue,
    )
    return r.chunked_req is None and r.cur_batch is None and not any(queues) and not r.emu_offloading()
