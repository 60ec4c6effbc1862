"""The emulator's HiCache worker: its settings are checked, its faults need it, and its host tier
keeps SGLang's free-list arithmetic (a backup takes host slots, leaving the tree gives them back)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from poolwatch_emulator.build import ModelShape
from poolwatch_emulator.cluster import Cluster
from poolwatch_emulator.cluster_config import ClusterConfig
from poolwatch_emulator.faults import parse_fault
from poolwatch_emulator.hicache import HostKVCache

PLAIN = ModelShape(full_kv_tokens=1024, mamba_slots=None, max_running_requests=8, context_len=512)


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        (replace(PLAIN, mamba_slots=64, host_kv_tokens=2048), "needs a plain model"),
        (replace(PLAIN, swa_kv_tokens=1024, host_kv_tokens=2048), "needs a plain model"),
        (replace(PLAIN, host_kv_tokens=512), "at least full_kv_tokens"),
    ],
)
def test_a_hicache_shape_is_refused_with_the_reason(shape: ModelShape, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        shape.check()


def test_a_host_fault_needs_a_hicache_worker() -> None:
    config = ClusterConfig(
        prefill=0, decode=0, unified=1, shape=PLAIN, faults=(parse_fault("hicache-host-leak"),)
    )
    with pytest.raises(ValueError, match="needs a HiCache worker"):
        Cluster(config)


def test_the_host_pool_hands_out_and_takes_back_slots_like_sglangs() -> None:
    host = HostKVCache(18, 4)  # aligned down to whole pages, as SGLang's
    assert (host.size, host.available_size()) == (16, 16)
    taken = host.alloc(8)
    assert taken is not None
    assert host.alloc(9) is None  # more than is free: nothing is taken
    assert host.free(taken) == 8
    assert sorted(host.free_slots.tolist()) == list(range(16))
    assert torch.equal(taken, torch.arange(8))
