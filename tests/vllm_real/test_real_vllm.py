"""The vLLM probe against real vLLM V1 releases, on CPU, in cached per-release venvs.

Each case runs ``check_release.py`` with the release venv's Python (this checkout's ``service/`` and
root first on ``PYTHONPATH``) and requires every check it prints to pass: long clean runs with
prefix caching, chunked prefill and aborts (plain, hybrid full + Mamba, and a pool small enough
to preempt), and five injected faults -- a double free, a shared prefix freed twice (which vLLM never
asserts on), the duplicate release in one free (vLLM #42571), a leak on abort, a premature free --
each named by exact block ids before vLLM's own assert (the shared double free and the premature
free at the free itself); and with guard on (``check_guard.py``), the same faults refused inside
``free_blocks``, vLLM's pool sound by its own structures after each, its assert never firing, and
no refusal in clean runs.  One release per family boundary that matters: 0.10.2 (the oldest),
0.18.0 (skipped_waiting), 0.26.0 (deferred frees and copy-on-write), 0.33.0, 0.34.0 (the newest).
The releases are the rigs' table's (:mod:`rigs.vllm.releases`); ``scripts/prepare_tiers`` builds
their venvs.  On 0.33.0, ``check_deferred.py`` drives the deferred-free queue (async scheduling with
a consumer KV connector, stepped like EngineCore's batch queue).  A missing venv skips its case with that
command as the reason (fails under POOLWATCH_REQUIRE_TOOLS=1).
"""

from __future__ import annotations

import pytest

from rigs.vllm.releases import Tier, release, tier
from tests.tiers import passed

CHECKS = {
    "clean_run",
    "clean_run_hybrid",
    "clean_run_preempting",
    "double_free",
    "shared_double_free",
    "duplicate_in_one_free_42571",
    "leak_on_abort",
    "premature_free",
    "plugin_activation",
    # guard mode (check_guard.py): each fault refused, the pool sound after it; nothing refused clean
    "guard_clean_run_preempting",
    "guard_clean_run_hybrid",
    "guard_double_free",
    "guard_shared_double_free",
    "guard_duplicate_in_one_free_42571",
    "guard_premature_free",
    # check_incremental.py: a randomized run's incremental figures and moves equal a from-scratch recount
    "incremental_equals_scratch",
    # check_free_time.py: every free's verdict equals a from-scratch owner count, over random runs
    "free_check_equals_recount",
}
DEFERRED_CHECKS = {
    "deferred_frees_clean",
    "deferred_freed_early",
    "deferred_entry_lost",
    "guard_deferred_freed_early",
}


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.parametrize("version", tier(Tier.PROBE))
def test_the_probe_names_every_injected_fault_in_real_vllm(version: str) -> None:
    passed(release(version).venv(), "tests.vllm_real.check_release", checks=CHECKS)


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.parametrize("version", tier(Tier.DEFERRED))
def test_deferred_frees_count_as_the_deferred_queues_and_a_fault_there_is_named(version: str) -> None:
    """0.33.0 defers frees under async scheduling with a consumer KV connector (check_deferred.py):
    a long run with blocks on the deferred queue has no finding, no pin and gap 0; blocks freed
    early while still queued are named (owner ``deferred@<fence>``) before vLLM's assert; a lost
    entry is a deficit of exactly its blocks (counted as possible connector pins, not named); with
    guard on, the early free is refused and the drain's is the only one."""
    passed(release(version).venv(), "tests.vllm_real.check_deferred", checks=DEFERRED_CHECKS)
