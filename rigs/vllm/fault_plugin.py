"""A vLLM general plugin that injects one double free into a real server, for the server tests.

Loaded by vLLM in EngineCore through a ``vllm.general_plugins`` entry point the test declares in a
temporary ``.dist-info`` on ``PYTHONPATH``; inert unless ``POOLWATCH_TEST_FAULT=double_free``.  It
wraps ``Scheduler._free_blocks``: when a request asking for exactly :data:`FAULT_MAX_TOKENS` tokens
finishes, vLLM frees its blocks as usual and then a stale copy of the list is freed again, the
way a double free happens (``BlockPool.free_blocks`` checks nothing: each block goes to
``ref_cnt == -1`` and stays queued once, and vLLM notices only when an allocation pops it).  The
ids freed twice go to stderr (the server's log) as ``poolwatch-test-fault: double free [ids] at
T ref_cnt after [counts]``, T the wall time (``time.time()``) just before the second free, when the
probe's free-time check runs, and each block's ``ref_cnt`` once the stale free returned (-1 for a
block freed twice from 1, unless the probe's guard refused it).

It also stamps vLLM's own crash: the ``created`` time of the record EngineCore's logger writes as
"EngineCore encountered a fatal error" goes to stderr as ``poolwatch-test-fault: fatal error
logged at T`` (vLLM's log line carries the second only).  Nothing of vLLM's output is changed.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

FAULT_MAX_TOKENS = 7
MARK = "poolwatch-test-fault: double free"
FATAL_MARK = "poolwatch-test-fault: fatal error logged at"
FATAL = "EngineCore encountered a fatal error"


class _Stamp(logging.Filter):
    """Passes every record; notes when vLLM's fatal-error record was created."""

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith(FATAL):
            print(f"{FATAL_MARK} {record.created:.6f}", file=sys.stderr, flush=True)
        return True


def plugin() -> None:
    if os.environ.get("POOLWATCH_TEST_FAULT") != "double_free":
        return
    from vllm.v1.core.sched.scheduler import Scheduler

    logging.getLogger("vllm.v1.engine.core").addFilter(_Stamp())
    original = Scheduler._free_blocks

    def _free_blocks(self: Any, request: Any) -> None:
        params = getattr(request, "sampling_params", None)
        stale = []
        if params is not None and params.max_tokens == FAULT_MAX_TOKENS:
            stale = [
                b for group in self.kv_cache_manager.get_blocks(request.request_id).blocks for b in group
            ]
        original(self, request)
        if stale:
            at = time.time()
            self.kv_cache_manager.block_pool.free_blocks(list(reversed(stale)))
            ids = sorted(b.block_id for b in stale)
            refs = [b.ref_cnt for b in sorted(stale, key=lambda b: b.block_id)]
            print(f"{MARK} {ids} at {at:.6f} ref_cnt after {refs}", file=sys.stderr, flush=True)

    Scheduler._free_blocks = _free_blocks
