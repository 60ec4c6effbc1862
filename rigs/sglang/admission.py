"""The scheduler's admission and its abort paths on a rank (run in the release's venv): SGLang's own
``Scheduler.get_new_batch_prefill`` (the prefix match, the ``PrefillAdder`` and its refusals),
``abort_request``, ``_abort_on_queued_limit`` and ``_abort_on_waiting_timeout``, bound on the rank
(:func:`scheduler_methods`, read by :func:`rigs.sglang.rank.rank_class`) with the attributes they
read set by :meth:`Admission.open_admission` -- the real-bug suite's copy-on-write Mamba slot
bugs (S03, S04) run through them.  What is stood in for: the tokenizer's socket (what the
scheduler sends back is recorded, ``sched.sent_back``) and the grammar backend (none).
"""

from __future__ import annotations

import time
from typing import Any

from rigs.sglang.pieces import Batch, build
from rigs.sglang.releases import Release

__all__ = ["METHODS", "Admission", "scheduler_methods"]

# the Scheduler's own methods the admission and abort steps run (each where the release has it)
METHODS = (
    "get_new_batch_prefill",
    "_get_new_batch_prefill_raw",
    "get_num_allocatable_reqs",
    "abort_request",
    "_abort_on_queued_limit",
    "_abort_on_waiting_timeout",
)


def scheduler_methods() -> dict[str, Any]:
    """The release's own :data:`METHODS`, to bind on its rank class."""
    from sglang.srt.managers.scheduler import Scheduler

    return {name: getattr(Scheduler, name) for name in METHODS if hasattr(Scheduler, name)}


class _Socket:
    """The tokenizer's socket: what the scheduler sends back (an abort's reply) is kept."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def send_output(self, out: Any, req: Any = None) -> None:
        self.sent.append(out)

    def send_pyobj(self, out: Any) -> None:
        self.sent.append(out)


class _NoGrammars:
    """A grammar manager with no grammar waiting (0.5.9+ asks it before admitting)."""

    def __init__(self) -> None:
        self.grammar_queue: list[Any] = []

    def has_waiting_grammars(self) -> bool:
        return False

    def abort_requests(self, recv_req: Any) -> None:
        return None

    def __iter__(self) -> Any:
        return iter(())

    def __len__(self) -> int:
        return 0


class Admission:
    """The admission and abort steps of a :class:`~rigs.sglang.driver.Driver`."""

    release: Release
    sched: Any
    steps: int

    def open_admission(self, *, priority: bool = False, max_queued: int | None = None) -> None:
        """What the batch builder and the abort paths read from the scheduler: a FCFS (or priority)
        policy over the rank's tree, its row count as the batch limits, no LoRA, no HiCache."""
        from sglang.srt.managers.schedule_policy import SchedulePolicy

        from rigs.sglang.server_args import published

        s, rows = self.sched, self.sched.req_to_token_pool.size
        s.server_args = published()  # published by Driver.new
        s.policy = build(
            SchedulePolicy,
            policy="fcfs",
            tree_cache=s.tree_cache,
            enable_hierarchical_cache=False,
            enable_priority_scheduling=priority,
            schedule_low_priority_values_first=False,
        )
        s.send_to_tokenizer, s.cur_batch, s.pp_size = _Socket(), None, 1
        s.enable_priority_scheduling, s.max_queued_requests = priority, max_queued
        s.try_preemption = s.enable_priority_preemption = False
        s.enable_hierarchical_cache = s.enable_hicache_storage = s.enable_lora = False
        s.schedule_low_priority_values_first, s.priority_scheduling_preemption_threshold = False, 10
        s.max_prefill_bs = s.max_running_requests = rows
        s.new_token_ratio, s.max_prefill_tokens, s.chunked_prefill_size = 0.7, 16384, 8192
        s.enable_dynamic_chunking = s.is_mixed_chunk = False
        s.truncation_align_size = s.prefill_delayer = s.dllm_config = None
        if self.release.grammar == "grammar_manager":
            s.grammar_manager = _NoGrammars()
        s.running_batch = Batch(s.running_batch.reqs, s.running_batch.forward_mode)

    @property
    def sent_back(self) -> list[Any]:
        return list(self.sched.send_to_tokenizer.sent)

    def queue(self, req: Any, *, waited_s: float = 0.0) -> None:
        """A request joins the waiting queue (``waited_s``: it entered that long ago)."""
        req.time_stats.wait_queue_entry_time = time.perf_counter() - waited_s
        self.sched.waiting_queue.append(req)

    def schedule(self) -> Any:
        """SGLang's own batch builder: the prefix match of every waiting request, the adder."""
        return self.sched.get_new_batch_prefill()

    def abort(self, rid: str) -> None:
        """A client's abort: SGLang's own ``abort_request``."""
        from sglang.srt.managers.io_struct import AbortReq

        self.sched.abort_request(AbortReq(rid=rid))

    def expire(self, req: Any, waited_s: float) -> None:
        """``req`` has waited ``waited_s``: SGLang's own ``_abort_on_waiting_timeout`` runs."""
        req.time_stats.wait_queue_entry_time = time.perf_counter() - waited_s
        self.sched._abort_on_waiting_timeout()

    def over_limit(self, incoming: Any) -> bool:
        """``incoming`` arrives at a full queue: SGLang's own ``_abort_on_queued_limit`` (True: the
        incoming request was refused; else a waiting one was dropped and it joins the queue)."""
        incoming.time_stats.wait_queue_entry_time = time.perf_counter()
        refused = bool(self.sched._abort_on_queued_limit(incoming))
        if not refused:
            self.sched.waiting_queue.append(incoming)
        return refused
