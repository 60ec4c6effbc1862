"""The HiCache host pool (``--enable-hierarchical-cache``): the probe's ``host`` account on the
emulator's HiCache worker and on SGLang-shaped trees (free + tree host values + in flight == size)."""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from poolwatch.conservation import gap
from poolwatch.model.rank import Exactness, Pool
from poolwatch.model.snapshot import Snapshot
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.reading import Reading
from poolwatch.probe.lifecycle import install, probe_of, uninstall
from poolwatch.probe.sglang.engine import SGLANG
from poolwatch.probe.sglang.host_census import HostReader, host_account, walk_host_values
from poolwatch_emulator.build import ModelShape
from poolwatch_emulator.cluster import Cluster
from poolwatch_emulator.cluster_config import ClusterConfig
from poolwatch_emulator.faults import parse_fault
from poolwatch_emulator.hicache import HostKVCache
from poolwatch_emulator.scheduler import Scheduler
from poolwatch_emulator.workload import WorkloadConfig

CONFIG = ProbeConfig(sample_interval_s=0.0, serve=False, directory="/nonexistent-poolwatch-test-dir")
SHAPE = ModelShape(
    full_kv_tokens=8192, mamba_slots=None, host_kv_tokens=16_384, max_running_requests=16, context_len=2048
)
WORKLOAD = WorkloadConfig(
    rate=12.0, prompt_median=300, output_median=12, prefix_median=120, burst_s=2.0, gap_s=3.0
)


@pytest.fixture
def probed() -> Iterator[None]:
    yield
    uninstall(Scheduler)


def host_gaps(
    version: str, steps: int, fault: str = "", *, until_gap: int = 0
) -> tuple[list[int | None], Snapshot]:
    """The host pool's gap after each of ``steps`` steps; with ``until_gap``, up to that many more
    steps until a nonzero gap is seen (the host walk is budgeted in wall time, so on a loaded machine
    a sample carries the previous account for more steps than on an idle one)."""
    config = ClusterConfig(
        version=version,
        shape=SHAPE,
        workload=WORKLOAD,
        prefill=0,
        decode=0,
        unified=1,
        chunked_prefill_size=128,
        faults=(parse_fault(fault),) if fault else (),
        idle_check_strict=False,
    )
    uninstall(Scheduler)
    install(SGLANG, Scheduler, replace(CONFIG, release=version))
    cluster = Cluster(config)
    gaps: list[int | None] = []
    for i in range(steps + until_gap):
        if i >= steps and any(gaps[steps // 2 :]):
            break
        cluster.step()
        probe = probe_of(cluster.schedulers[0])
        assert probe is not None
        assert probe.latest is not None
        gaps.append(gap(probe.latest.pools[Pool.HOST]))
    assert probe.latest is not None
    return gaps, probe.latest


@pytest.mark.parametrize("version", ["0.5.4.post1", "0.5.9", "0.5.12"])
def test_a_healthy_hicache_worker_balances_its_host_pool_at_every_sample(probed: None, version: str) -> None:
    gaps, last = host_gaps(version, 300)
    assert set(gaps) == {0}
    host = last.pools[Pool.HOST]
    assert host.size == 16_384
    assert host.held == 0
    assert host.unreadable == ()
    assert host.evictable is not None
    assert host.evictable > 0


@pytest.mark.parametrize(("fault", "sign"), [("hicache-host-leak", 1), ("hicache-host-double-free", -1)])
def test_a_host_slot_leak_or_double_free_shows_as_the_host_pools_gap(
    probed: None, fault: str, sign: int
) -> None:
    gaps, last = host_gaps("0.5.9", 200, f"{fault}@step=60", until_gap=5000)
    assert set(gaps[:55]) == {0}
    # the host walk runs within its budget, so a sample may carry the previous account a while
    assert {g for g in gaps[60:] if g}
    assert all(g is not None and g * sign >= 0 for g in gaps[60:])
    assert all(gap(a) == 0 for p, a in last.pools.items() if p is not Pool.HOST)  # device pools untouched


def test_a_worker_without_hicache_has_no_host_pool(probed: None) -> None:
    config = ClusterConfig(
        version="0.5.9", shape=replace(SHAPE, host_kv_tokens=None), unified=1, prefill=0, decode=0
    )
    install(SGLANG, Scheduler, replace(CONFIG, release="0.5.9"))
    cluster = Cluster(config)
    cluster.step()
    probe = probe_of(cluster.schedulers[0])
    assert probe is not None
    assert probe.latest is not None
    assert Pool.HOST not in probe.latest.pools


# --- SGLang-shaped trees: what counts as cached, locked and in flight -------------------------


def node(host: Any, children: tuple[Any, ...] = (), ref: int = 0) -> SimpleNamespace:
    return SimpleNamespace(host_value=host, host_ref_counter=ref, children=dict(enumerate(children)))


def hicache(free: int, size: int, root: Any, **tree: Any) -> SimpleNamespace:
    pool = HostKVCache(size, 1)
    pool.free_slots = torch.arange(free, dtype=torch.int64)
    return SimpleNamespace(tree_cache=SimpleNamespace(token_to_kv_pool_host=pool, root_node=root, **tree))


def test_host_copies_split_by_the_host_lock_and_the_roots_empty_list_counts_nothing() -> None:
    root = node(
        [], (node(torch.arange(4), (node(torch.arange(2), ref=1),)), node(None, (node(torch.arange(3)),)))
    )
    walked = walk_host_values(root)
    assert (walked.evictable, walked.protected, walked.nodes) == (7, 2, 3)
    account = host_account(hicache(7, 16, root), Reading())
    assert account is not None
    assert (account.available, account.evictable, account.protected, account.held, gap(account)) == (
        7,
        7,
        2,
        0,
        0,
    )


def test_a_write_in_flight_is_on_its_node_already_so_it_is_not_counted_twice() -> None:
    backed = node(torch.arange(4))
    sched = hicache(12, 16, node([], (backed,)), ongoing_write_through={7: backed}, ongoing_load_back={})
    account = host_account(sched, Reading())
    assert account is not None
    assert gap(account) == 0


def test_with_a_storage_backend_only_size_and_free_are_reported_and_the_gap_is_unknown() -> None:
    sched = hicache(12, 16, node([], (node(torch.arange(4)),)), enable_storage=True, ongoing_prefetch={})
    account = host_account(sched, Reading())
    assert account is not None
    assert (account.size, account.available) == (16, 12)
    assert account.unreadable == ("held", "evictable", "protected")
    assert account.exactness is Exactness.COARSE  # exported as poolwatch_pool_figures_exact 0
    assert gap(account) is None


def test_a_tree_without_a_host_pool_reports_none() -> None:
    assert host_account(SimpleNamespace(tree_cache=SimpleNamespace(root_node=node([]))), Reading()) is None


def test_a_unified_tree_of_0_5_23_without_a_host_pool_group_has_no_host_pool() -> None:
    sched = hicache(12, 16, node([], (node(torch.arange(4)),)), host_pool_group=None)
    assert host_account(sched, Reading()) is None


class Named(enum.StrEnum):
    """Like 0.5.23's ``PoolName``: a ``str`` enum, hashed by its member name, so ``"kv"`` is no key."""

    KV = "kv"
    MAMBA = "mamba"


def unified(kv: Any, **pools: Any) -> SimpleNamespace:
    entries = {Named.MAMBA: SimpleNamespace(host_pool=HostKVCache(8, 1))}
    if kv is not None:
        entries[Named.KV] = SimpleNamespace(host_pool=kv)
    group = SimpleNamespace(entry_map=entries, **pools)
    return SimpleNamespace(tree_cache=SimpleNamespace(host_pool_group=group))


def test_0_5_23s_kv_host_pool_is_the_host_pool_read_coarsely() -> None:
    kv = HostKVCache(16, 1)
    kv.free_slots = torch.arange(5, dtype=torch.int64)
    account = host_account(unified(kv), Reading())
    assert account is not None
    assert (account.pool, account.size, account.available) == (Pool.HOST, 16, 5)
    assert (account.evictable, account.protected, account.held) == (None, None, None)
    assert account.unreadable == ("evictable", "protected", "held")
    assert account.exactness is Exactness.COARSE
    assert gap(account) is None


def test_0_5_23s_host_size_is_the_logical_size_the_tree_indexes() -> None:
    kv = SimpleNamespace(size=16, logical_size=32, available_size=lambda: 30)
    account = host_account(unified(kv), Reading())
    assert account is not None
    assert (account.size, account.available) == (32, 30)


def test_a_0_5_23_group_without_a_kv_host_pool_has_no_host_pool() -> None:
    assert host_account(unified(None), Reading()) is None


class Ticks:
    """A clock that advances ``step`` seconds at every reading."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_the_host_walk_is_repeated_only_when_its_cost_fits_the_budget() -> None:
    root = node([], (node(torch.arange(4)),))
    sched = hicache(12, 16, root)
    reader = HostReader(budget=0.01, clock=Ticks(0.001))  # each walk "costs" 1 ms: next one in 0.1 s
    first = reader.read(sched, Reading())
    sched.tree_cache.token_to_kv_pool_host.free_slots = torch.arange(13)  # a host slot freed twice
    kept = [reader.read(sched, Reading()) for _ in range(90)]  # 1 ms a call: 90 ms, within 0.1 s
    assert first is not None
    assert all(k is first for k in kept)
    later = [reader.read(sched, Reading()) for _ in range(20)]  # past 0.1 s
    assert gap(later[-1]) == -1  # read again once the budget allowed it


def test_a_host_account_that_walks_nothing_is_read_at_every_sample() -> None:
    # 0.5.23: the budget is for the tree walk; the KV host pool's free count is read each time
    kv = HostKVCache(16, 1)
    kv.free_slots = torch.arange(16, dtype=torch.int64)
    sched = unified(kv)
    reader = HostReader(budget=0.01, clock=Ticks(0.001))
    seen = []
    for free in (16, 12, 13, 4):  # an alloc, a free, an alloc: back to back, within any budget
        kv.free_slots = torch.arange(free, dtype=torch.int64)
        account = reader.read(sched, Reading())
        assert account is not None
        seen.append(account.available)
    assert seen == [16, 12, 13, 4]


def test_a_storage_backends_coarse_host_account_is_read_at_every_sample() -> None:
    sched = hicache(12, 16, node([], ()))
    sched.tree_cache.enable_storage = True
    reader = HostReader(budget=0.01, clock=Ticks(0.001))
    first = reader.read(sched, Reading())
    sched.tree_cache.token_to_kv_pool_host.free_slots = torch.arange(9)
    second = reader.read(sched, Reading())
    assert first is not None
    assert second is not None
    assert (first.available, second.available) == (12, 9)


def reference_walk(root: Any) -> tuple[int, int, int]:
    """The plain per-node walk: (evictable, protected, nodes with a host copy)."""
    ev = pr = n = 0
    stack = [root]
    while stack:
        x = stack.pop()
        stack.extend(x.children.values())
        if x.host_value is not None and len(x.host_value):
            n += 1
            if x.host_ref_counter > 0:
                pr += len(x.host_value)
            else:
                ev += len(x.host_value)
    return ev, pr, n


@given(
    st.lists(
        st.tuples(st.integers(0, 1_000), st.one_of(st.none(), st.integers(0, 9)), st.integers(0, 2)),
        max_size=60,
    )
)
def test_the_level_walk_agrees_with_the_per_node_walk(spec: list[tuple[int, int | None, int]]) -> None:
    nodes = [node([])]
    for parent, size, ref in spec:
        child = node(None if size is None else torch.arange(size), ref=ref)
        owner = nodes[parent % len(nodes)]
        owner.children[len(owner.children)] = child
        nodes.append(child)
    walked = walk_host_values(nodes[0])
    assert (walked.evictable, walked.protected, walked.nodes) == reference_walk(nodes[0])
