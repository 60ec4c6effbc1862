"""A crash's incident text names the exception and the block-pool frame first, then the traceback's
tail, bounded."""

from __future__ import annotations

from poolwatch.detect.families.incidents import raised
from poolwatch.sources.vllm.log.crash import MAX_TEXT, crash_text, read_crash

SP = "/usr/local/lib/python3.12/dist-packages/vllm"
DOUBLE_FREE = [
    "EngineCore encountered a fatal error.",
    "Traceback (most recent call last):",
    f'  File "{SP}/v1/engine/core.py", line 1496, in run_engine_core',
    "    engine_core.run_busy_loop()",
    f'  File "{SP}/v1/core/sched/scheduler.py", line 1256, in schedule',
    f'  File "{SP}/v1/core/single_type_kv_cache_manager.py", line 405, in allocate_new_blocks',
    "    new_blocks = self.block_pool.get_new_blocks(num_new_blocks)",
    "                 ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    f'  File "{SP}/v1/core/block_pool.py", line 690, in get_new_blocks',
    "    assert block.ref_cnt == 0",
    "           ^^^^^^^^^^^^^^^^^^",
    "AssertionError",
]


def test_a_failed_block_pool_assert_is_named_with_its_frame() -> None:
    crash = read_crash(DOUBLE_FREE)
    assert crash.exception == "AssertionError"
    assert crash.in_pool
    assert str(crash.frame) == "v1/core/block_pool.py:690 in get_new_blocks: assert block.ref_cnt == 0"
    text = crash_text(DOUBLE_FREE)
    assert text.splitlines()[0] == (
        "EngineCore encountered a fatal error. "
        "[AssertionError at v1/core/block_pool.py:690 in get_new_blocks: assert block.ref_cnt == 0]"
    )
    assert "^^^" not in text  # the carets say nothing a reader needs
    assert raised(text) == "AssertionError"  # what PoolwatchSchedulerCrashed names


def test_the_free_queue_refusing_a_block_is_a_pool_fault_too() -> None:
    lines = [
        "EngineCore encountered a fatal error.",
        f'  File "{SP}/v1/core/block_pool.py", line 249, in touch',
        f'  File "{SP}/v1/core/kv_cache_utils.py", line 332, in remove',
        "RuntimeError: remove() called on an invalid block: KVCacheBlock(block_id=17, ref_cnt=0)",
    ]
    crash = read_crash(lines)
    assert crash.in_pool
    assert crash.exception.startswith("RuntimeError: remove() called on an invalid block")
    assert crash.frame is not None
    assert (crash.frame.path, crash.frame.func) == (
        "v1/core/kv_cache_utils.py",
        "remove",
    )


def test_a_crash_outside_the_block_bookkeeping_names_its_deepest_frame() -> None:
    lines = [
        "EngineCore encountered a fatal error.",
        f'  File "{SP}/v1/core/sched/scheduler.py", line 900, in update_from_output',
        f'  File "{SP}/v1/worker/gpu_model_runner.py", line 2100, in execute_model',
        "torch.OutOfMemoryError: CUDA out of memory.",
    ]
    crash = read_crash(lines)
    assert not crash.in_pool
    assert str(crash.frame) == "v1/worker/gpu_model_runner.py:2100 in execute_model"
    assert read_crash(["EngineCore failed to start."]).headline("EngineCore failed to start.") == (
        "EngineCore failed to start."
    )


def test_a_long_traceback_keeps_its_headline_and_its_tail_within_the_bound() -> None:
    frames = [f'  File "{SP}/v1/engine/x{i}.py", line {i}, in f{i}' for i in range(400)]
    text = crash_text([DOUBLE_FREE[0], "Traceback (most recent call last):", *frames, *DOUBLE_FREE[8:]])
    assert len(text) <= MAX_TEXT
    assert text.splitlines()[0].startswith(
        "EngineCore encountered a fatal error. [AssertionError at v1/core/"
    )
    assert text.splitlines()[-1] == "AssertionError"
