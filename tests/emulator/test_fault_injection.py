"""Each fault that unbalances the books breaks the pool, in the direction, that its real bug did;
SGLang's idle check then raises with the release's message and the worker crashes as SGLang does.
(The classes that keep the books balanced are in test_blind_classes.py.)"""

from __future__ import annotations

import re

import pytest
from tests.emulator.emu_ledger import gaps
from tests.emulator.emu_scenarios import COW, DECODE_ABORTS, HEAVY, HICACHE, MAMBA, PLAIN, SWA, cluster

from poolwatch.model.rank import Pool
from poolwatch_emulator import FAULTS, Cluster
from poolwatch_emulator.aborts import Abort
from poolwatch_emulator.scenarios import scenario_config

_SCENARIOS = {
    "pd-chunked-mamba-double-free": {"pd": True, "shape": MAMBA, "workload": HEAVY},
    "mamba-cow-leak-on-abort": {"pd": False, "shape": MAMBA, "workload": COW},
    "full-kv-leak-on-retract": {"pd": False, "shape": PLAIN, "workload": HEAVY},
    "pd-decode-abort-kv-leak": {"pd": True, "shape": PLAIN, "workload": DECODE_ABORTS},
    "swa-page-overcount": {"pd": False, "shape": SWA, "workload": HEAVY},
    "hicache-host-leak": {"pd": False, "shape": HICACHE, "workload": HEAVY},
    "hicache-host-double-free": {"pd": False, "shape": HICACHE, "workload": HEAVY},
}
_TRIGGER = {"mamba-cow-leak-on-abort": "@p=1"}
# the classes SGLang's pool gap sees (the others keep its books balanced; the encoder cache is vLLM's)
GAP_FAULTS = [
    name
    for name, info in FAULTS.items()
    if info.sign in ("surplus", "deficit")
    and info.pool in {p.value for p in Pool}
    # vLLM's encoder cache is a Pool too (the probe's vLLM room reads it); SGLang's books and idle
    # check never count it: its faults are the blind classes' (test_blind_classes.py)
    and info.pool != Pool.ENCODER.value
]
CASES = [(name, v) for name in GAP_FAULTS for v in FAULTS[name].emulated_versions]
# SGLang checks no HiCache host conservation: a host fault never reaches its idle check
CRASH_CASES = [(name, v) for name, v in CASES if FAULTS[name].pool != Pool.HOST]

OLD_MESSAGE = re.compile(r"^ValueError: token_to_kv_pool_allocator memory leak detected! \S", re.M)
NEW_MESSAGE = re.compile(
    r"^ValueError: pool memory leak detected! \[full\] total=\d+, available=\d+, evictable=\d+, "
    r"protected=\d+, session_held=0, uncached=0",
    re.M,
)


def _inject(name: str, version: str, **kw: object) -> tuple[Cluster, dict[Pool, int]]:
    """Run until the fault struck once; return the cluster and the gaps of the struck rank."""
    if name in _SCENARIOS:
        c = cluster(version, faults=(name + _TRIGGER.get(name, ""),), **{**_SCENARIOS[name], **kw})  # type: ignore[arg-type]
    else:  # the later classes: the catalogue's own scenario (speculative decoding, ...)
        c = Cluster(scenario_config(name, version=version, epoch=1_764_000_000.0, **kw))
    assert c.run_until(lambda: any(r.faults.fired[name] for r in c.schedulers), 4000), f"{name} never struck"
    struck = next(r for r in c.schedulers if r.faults.fired[name])
    return c, gaps(struck)


def _crash_log(c: Cluster) -> str:
    c.drain(abort_queued=True)
    assert c.run_until(lambda: bool(c.crashed), 4000), "the idle check never fired"
    lines = [line for w in c.crashed for line in w.log_lines()]
    return "\n".join(line for line in lines if "Scheduler hit an exception" in line)


@pytest.mark.parametrize(("name", "version"), CASES)
def test_a_fault_breaks_its_documented_pool_in_its_documented_direction(name: str, version: str) -> None:
    info = FAULTS[name]
    _, g = _inject(name, version)
    pool = Pool(info.pool)
    assert g[pool] < 0 if info.sign == "surplus" else g[pool] > 0
    assert all(v == 0 for p, v in g.items() if p != pool and not (pool is Pool.FULL and p is Pool.SWA))


@pytest.mark.parametrize(("name", "version"), CRASH_CASES)
def test_after_a_fault_the_idle_check_raises_with_the_releases_message_and_the_worker_crashes(
    name: str, version: str
) -> None:
    c, _ = _inject(name, version)
    log = _crash_log(c)
    assert "Scheduler hit an exception: Traceback (most recent call last):" in log
    assert (NEW_MESSAGE if version == "0.5.12" else OLD_MESSAGE).search(log), log[-600:]
    assert all(not w.crashed or w.crash_message.startswith("ValueError") for w in c.workers)


SEED = re.compile(
    r"ValueError: token_to_kv_pool_allocator memory leak detected! full_available_size=(\d+), "
    r"full_evictable_size=(\d+), self\.token_to_kv_pool_allocator\.size=(\d+), "
    r"self\.tree_cache\.full_protected_size\(\)=0\nmamba_available_size=(\d+), mamba_evictable_size=(\d+), "
    r"self\.req_to_token_pool\.mamba_pool\.size=(\d+), self\.tree_cache\.mamba_protected_size\(\)=0\n"
)


def test_the_seed_fault_reproduces_the_seed_incident_on_0_5_4_post1() -> None:
    c, g = _inject("pd-chunked-mamba-double-free", "0.5.4.post1")
    assert g[Pool.FULL] == 0
    assert g[Pool.MAMBA] == -1
    m = SEED.search(_crash_log(c))
    assert m is not None
    full_av, full_ev, full_size, mamba_av, mamba_ev, mamba_size = map(int, m.groups())
    assert full_av + full_ev == full_size  # full KV balanced
    assert mamba_av + mamba_ev == mamba_size + 1  # one Mamba slot counted twice
    assert [w.role for w in c.crashed] == ["prefill"]


def test_the_seed_fault_surplus_grows_by_one_per_affected_chunk_boundary() -> None:
    c = cluster("0.5.4.post1", faults=("pd-chunked-mamba-double-free@p=1",), shape=MAMBA, workload=HEAVY)
    prefill = c.by_role("prefill")[0].ranks[0]
    assert c.run_until(lambda: prefill.faults.fired["pd-chunked-mamba-double-free"] >= 3, 4000)
    assert gaps(prefill)[Pool.MAMBA] == -prefill.faults.fired["pd-chunked-mamba-double-free"]


def test_a_chunked_request_aborted_at_its_boundary_gives_the_seed_fault_no_chance() -> None:
    """Released whole at its boundary, the aborted chunked request has no row to free twice: the
    fault is neither counted nor spent there, and strikes at the next real boundary (a strike once
    counted without its double free left a benchmark run struck and balanced)."""
    name = "pd-chunked-mamba-double-free"
    c = cluster("0.5.4.post1", faults=(name + "@p=1",), shape=MAMBA, workload=HEAVY)
    prefill = c.by_role("prefill")[0].ranks[0]
    assert c.run_until(lambda: prefill.chunked_req is not None, 4000)
    assert prefill.faults.fired[name] == 0  # the first chunked request, before its first boundary
    aborted = prefill.chunked_req
    prefill.abort_request(Abort(aborted.rid))
    assert c.run_until(lambda: prefill.chunked_req is not aborted, 100)
    assert prefill.faults.fired[name] == 0
    assert gaps(prefill)[Pool.MAMBA] == 0
    assert c.run_until(lambda: prefill.faults.fired[name] > 0, 4000)
    assert gaps(prefill)[Pool.MAMBA] == -prefill.faults.fired[name]


def test_a_non_strict_idle_check_warns_every_1000_idle_iterations_instead_of_crashing() -> None:
    c, _ = _inject("full-kv-leak-on-retract", "0.5.9", idle_check_strict=False)
    c.drain(abort_queued=True)
    rank = c.schedulers[0]
    assert c.run_until(lambda: rank.count_memory_leak_warnings >= 2001, 60_000)
    warnings = [line for line in c.workers[0].log_lines() if "memory leak detected" in line]
    assert len(warnings) == 3  # iterations 0, 1000 and 2000
    assert not c.crashed


def test_the_0_5_4_release_ignores_the_strict_setting_and_always_crashes() -> None:
    c, _ = _inject("full-kv-leak-on-retract", "0.5.4.post1", idle_check_strict=False)
    assert "ValueError" in _crash_log(c)


def test_every_rank_of_a_crashed_worker_stops() -> None:
    c, _ = _inject("pd-chunked-mamba-double-free", "0.5.4.post1", tp=2)
    _crash_log(c)
    prefill = c.by_role("prefill")[0]
    before = [r.emu_iteration for r in prefill.ranks]
    c.run_steps(50)
    assert [r.emu_iteration for r in prefill.ranks] == before
    assert not c.by_role("decode")[0].crashed


def test_without_faults_the_idle_check_runs_and_passes_in_traffic_gaps() -> None:
    c = cluster(
        "0.5.12",
        workload=HEAVY.__class__(rate=4.0, prompt_median=300, output_median=60, burst_s=20.0, gap_s=30.0),
    )
    c.run_for(200.0)
    assert not c.crashed
    assert all(r.emu_idle_checks > 0 for r in c.schedulers)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"version": "0.5.9", "faults": ("pd-chunked-mamba-double-free",)}, "cannot be injected on 0.5.9"),
        ({"pd": False, "faults": ("pd-decode-abort-kv-leak",)}, "needs a decode worker"),
        ({"shape": PLAIN, "faults": ("mamba-cow-leak-on-abort",)}, "needs a Mamba-hybrid model"),
        ({"faults": ("swa-page-overcount",)}, "needs a SWA-hybrid model"),
    ],
)
def test_a_fault_that_cannot_happen_in_the_cluster_is_refused_with_a_clear_error(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        cluster(**kwargs)  # type: ignore[arg-type]
