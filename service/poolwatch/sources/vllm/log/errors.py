"""Which pool error a vLLM crash or warning names, and the known bugs it matches.  Pure data.

vLLM has no pool invariant of its own at run time; what it has are asserts deep in its block
bookkeeping, which kill EngineCore long after the cause, and a few warnings.  Each is named here by
class and by the bugs of ``/work/shared/bug-zoo.md`` it may be, the likeliest first:

* a block handed out at ``ref_cnt`` -1 (``assert block.ref_cnt == 0`` in ``get_new_blocks``), the
  free queue running dry mid-walk (``popleft_n``'s ``assert curr_block is not None``), its fake tail
  losing its neighbour, a ``remove()`` of a block not on it: a block freed twice (V01, O11);
* a transfer's completion for a request already freed (``assert req_id in self.requests`` in
  ``_update_from_kv_xfer_finished``, a ``KeyError`` on 0.10 - 0.11): a second release, refused (V06);
* Mamba align-mode asserts on a request's block count or a padding block's hash: counter errors
  (V10, V11); V0's ``Double free! PhysicalTokenBlock``: a double free (V21);
* warnings that blocks are held for what will never read them: stranded (V02, V04, V05, V13).

A rule matches a crash when its text matches the exception or a statement of the traceback, in
the frame's function when it names one.
"""

from __future__ import annotations

import re

from poolwatch.sources.logfile.errors import ErrorRule
from poolwatch.sources.logfile.events import ErrorClass

__all__ = ["CRASH_RULES", "WARNING_RULES"]

_DF, _COUNTER, _STRANDED = ErrorClass.DOUBLE_FREE, ErrorClass.COUNTER, ErrorClass.STRANDED


CRASH_RULES: tuple[ErrorRule, ...] = (
    ErrorRule(
        "ref-cnt",
        "0.10.2-0.34.0 (block_pool.py)",
        re.compile(r"assert block\.ref_cnt == 0"),
        _DF,
        "a block handed out while still referenced: freed twice before",
        ("V01", "O11"),
        func="get_new_blocks",
    ),
    ErrorRule(
        "popleft-n",
        "0.11-0.34.0 (kv_cache_utils.py)",
        re.compile(r"assert curr_block is not None"),
        _DF,
        "the free queue ran out mid-walk: a block queued twice",
        ("V01", "O11"),
        func="popleft_n",
    ),
    ErrorRule(
        "fake-tail",
        "0.10.2-0.34.0 (kv_cache_utils.py)",
        re.compile(r"prev_free_block of fake_free_list_tail should always exist"),
        _DF,
        "the free queue's tail lost its neighbour: a block queued twice",
        ("V01",),
    ),
    ErrorRule(
        "remove-invalid",
        "0.10.2-0.34.0 (kv_cache_utils.py)",
        re.compile(r"remove\(\) called on an invalid block"),
        _DF,
        "a block taken off the free queue that is not on it: freed twice before",
        ("V01", "O11"),
    ),
    ErrorRule(
        "kv-xfer-finished",
        "0.10.2-0.34.0 (sched/scheduler.py)",
        re.compile(r"assert req_id in self\.requests|KeyError"),
        _DF,
        "a transfer's completion for a request already freed: a second release, refused",
        ("V06",),
        func="_update_from_kv_xfer_finished",
        proven=False,
    ),
    ErrorRule(
        "required-blocks",
        "0.15-0.22 (Mamba align)",
        re.compile(r"num_required_blocks \d+ < len\(req_blocks\)"),
        _COUNTER,
        "a request's block count went below the blocks it holds",
        ("V10",),
    ),
    ErrorRule(
        "block-hash",
        "0.15.x (Mamba align)",
        re.compile(r"assert block\.block_hash is not None"),
        _COUNTER,
        "a padding block cached as if it held state",
        ("V11",),
        func="cache_blocks",
    ),
    ErrorRule(
        "v0-double-free",
        "V0 <= 0.3.3",
        re.compile(r"Double free! PhysicalTokenBlock"),
        _DF,
        "V0's block manager freed a block twice",
        ("V21",),
    ),
)

WARNING_RULES: tuple[ErrorRule, ...] = (
    ErrorRule(
        "reset-prefix-cache",
        "0.7-0.34.0 (block_pool.py)",
        re.compile(r"Failed to reset prefix cache because some blocks \(\d{1,12}\) are not freed yet"),
        _STRANDED,
        "blocks still held at a prefix-cache reset (a leak only when nothing was running)",
        ("V13", "V02", "V05"),
        proven=False,
        files=("block_pool.py", "prefix_caching_block.py"),  # V1, V0
    ),
    ErrorRule(
        "unrecognized-request",
        "0.9-0.34.0 (nixl_connector.py)",
        re.compile(r"Potentially invalid KV blocks for unrecognized request"),
        _STRANDED,
        "a decode worker read blocks of a request the prefill no longer holds",
        ("V04",),
        proven=False,
        files=("_connector.py",),  # a KV connector's (nixl_connector.py)
    ),
    ErrorRule(
        "expired-blocks",
        "0.10-0.34.0 (nixl_connector.py)",
        re.compile(r"Releasing expired KV blocks for request \S{1,200} which were retrieved by 0 decode"),
        _STRANDED,
        "blocks held for a decode worker that never read them, released only at the timeout",
        ("V05",),
        proven=False,
        files=("_connector.py",),
    ),
)
