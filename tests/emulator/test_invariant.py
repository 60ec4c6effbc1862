"""Without a fault, every pool of every rank balances exactly at every loop boundary."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tests.emulator.emu_ledger import imbalances
from tests.emulator.emu_scenarios import HEAVY, MAMBA, PAGED, PLAIN, SWA, cluster

from poolwatch_emulator import ModelShape
from poolwatch_emulator.encoder_cache import EncoderCacheConfig
from poolwatch_emulator.spec import SpecConfig

CASES = [
    ("0.5.4.post1", True, MAMBA),
    ("0.5.4.post1", False, MAMBA),
    ("0.5.9", True, MAMBA),
    ("0.5.9", False, PAGED),
    ("0.5.12", True, PAGED),
    ("0.5.12", False, MAMBA),
    ("0.5.12", False, SWA),
]


def _run_checked(
    version: str, pd: bool, shape: ModelShape, steps: int, seed: int, **kw: object
) -> dict[str, int]:
    c = cluster(version, pd=pd, shape=shape, seed=seed, **kw)  # type: ignore[arg-type]
    for _ in range(steps):
        c.step()
        assert not c.crashed, [w.crash_message for w in c.crashed]
        bad = imbalances(c)
        assert not bad, f"step {c.steps}: {bad}"
    ranks = c.schedulers
    return {
        "finished": sum(r.emu_finished_total for r in ranks),
        "retracted": sum(r.num_retracted_reqs for r in ranks),
        "chunks": sum(1 for w in c.workers for line in w.log_lines() if "Prefill batch" in line),
    }


@pytest.mark.parametrize(("version", "pd", "shape"), CASES)
def test_every_pool_balances_at_every_loop_boundary_without_a_fault(
    version: str, pd: bool, shape: ModelShape
) -> None:
    seen = _run_checked(version, pd, shape, steps=600, seed=1)
    assert seen["finished"] > 20


ENCODER_CASES = [
    # images shared by content hash, two a request, chunked prefill splitting them across chunks
    (EncoderCacheConfig(kind="mm", cache_size=1024, compute_budget=512), True, 2),
    # an encoder-decoder model: one audio input before the prompt, credited back once it ran
    (EncoderCacheConfig(kind="enc-dec", cache_size=2048, compute_budget=1024), False, 1),
]


@pytest.mark.parametrize(("encoder", "in_prompt", "items"), ENCODER_CASES)
def test_with_an_encoder_cache_every_pool_and_the_encoder_cache_balance(
    encoder: EncoderCacheConfig, in_prompt: bool, items: int
) -> None:
    workload = replace(HEAVY, mm_fraction=0.7, mm_items=items, mm_embeds=128, mm_in_prompt=in_prompt)
    seen = _run_checked("0.5.12", False, PLAIN, steps=600, seed=4, workload=workload, encoder_cache=encoder)
    assert seen["finished"] > 20


def test_the_heavy_workload_really_exercises_retraction_and_chunking() -> None:
    seen = _run_checked("0.5.4.post1", False, MAMBA, steps=1500, seed=2)
    assert seen["retracted"] > 0
    assert seen["chunks"] > seen["finished"]


def test_tensor_and_data_parallel_ranks_balance_and_tp_ranks_keep_identical_bookkeeping() -> None:
    c = cluster("0.5.12", tp=2, dp=2)
    for _ in range(400):
        c.step()
        assert not imbalances(c)
    for worker in c.workers:
        for dp in range(2):
            a, b = worker.group(dp)
            assert (
                a.token_to_kv_pool_allocator.free_pages.tolist()
                == b.token_to_kv_pool_allocator.free_pages.tolist()
            )
            assert a.req_to_token_pool.free_slots == b.req_to_token_pool.free_slots
            assert [r.rid for r in a.running_batch.reqs] == [r.rid for r in b.running_batch.reqs]


LONG = [
    (*CASES[0], 2.0, None),
    (*CASES[6], 1.0, None),
    # EAGLE speculative decoding (spec v2's draft reserve, verify and release), unified and PD
    ("0.5.9", False, PAGED, 2.0, SpecConfig()),
    ("0.5.12", True, MAMBA, 2.0, SpecConfig(num_steps=5, eagle_topk=2, num_draft_tokens=8)),
]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [11, 12, 13])
@pytest.mark.parametrize(("version", "pd", "shape", "rate", "spec"), LONG)
def test_the_invariant_holds_for_over_100k_steps_with_bursts_and_idle_gaps(
    version: str, pd: bool, shape: ModelShape, rate: float, spec: SpecConfig | None, seed: int
) -> None:
    """3 seeds x 34,000 steps = 102,000 checked loop boundaries per configuration, at a rate near
    the cluster's capacity (queues drain in the gaps, retraction under the bursts)."""
    workload = replace(HEAVY, rate=rate, burst_s=300.0, gap_s=60.0)
    c = cluster(version, pd=pd, shape=shape, seed=seed, workload=workload, speculative=spec)
    for _ in range(34_000):
        c.step()
        assert not c.crashed, [w.crash_message for w in c.crashed]
        bad = imbalances(c)
        assert not bad, f"step {c.steps}: {bad}"
    ranks = c.schedulers
    assert all(r.emu_idle_checks > 0 for r in ranks)
    assert sum(r.emu_finished_total for r in ranks) > 1000
    assert sum(r.num_retracted_reqs for r in ranks) > 0
