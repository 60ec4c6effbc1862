"""What the SGLang probe tests set up on the stand-ins of :mod:`rigs.fakes.sglang`: a probe reading a
fake rank by hand (:func:`by_hand`, :data:`GUARD_CONFIG`), the seed incident's state
(:func:`seed_rank`), and an emulated load where KV runs out first (:data:`BUSY`)."""

from __future__ import annotations

from poolwatch.probe.core.config import ProbeConfig
from poolwatch_emulator.workload import WorkloadConfig
from rigs.fakes.sglang import Rank

# an emulated load where KV runs out first, so requests wait holding the COW slot of their prefix hit
BUSY = WorkloadConfig(
    rate=30.0,
    prompt_median=600,
    output_median=200,
    prefix_median=120,
    burst_s=3.0,
    gap_s=2.0,
    abort_fraction=0.2,
)


def by_hand(release: str = "0.5.4.post1", census_interval_s: float = 0.0) -> ProbeConfig:
    """A probe reading a fake rank of ``release`` by hand: every sample now, not served, censuses
    every time (0) or on their schedule."""
    return ProbeConfig(
        sample_interval_s=0.0,
        census_interval_s=census_interval_s,
        serve=False,
        directory="/nonexistent-poolwatch-test-dir",
        release=release,
    )


GUARD_CONFIG = by_hand()


def seed_rank() -> tuple[Rank, int]:
    """0.5.4.post1 PD prefill right after process_prefill_chunk freed the chunked request's slot."""
    rank = Rank(kv=64, mamba=8, rows=4)
    req = rank.chunked("long", origin=40, chunk=16)
    assert req.mamba_pool_idx is not None
    rank.mamba.free(req.mamba_pool_idx.reshape(1))
    return rank, int(req.mamba_pool_idx)
