"""The classes that keep the books balanced (issue 39): stranded holds, a lock without its locker,
counter lies and the encoder cache.  Each fault does what its real bug did -- SGLang's pool gap
stays honest about the ids (or, for a counter bug, the ids stay right while a counter lies) -- and
the same scenario without the fault (the fixed release's path) is clean throughout."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from tests.emulator.emu_census import full_census
from tests.emulator.emu_ledger import encoder_gap, gaps

from poolwatch.model.rank import Pool
from poolwatch_emulator import FAULTS, Cluster, truth
from poolwatch_emulator.scenarios import scenario_config
from poolwatch_emulator.scheduler import Scheduler

BLIND = [name for name, info in FAULTS.items() if info.sign not in ("surplus", "deficit")]


def _cluster(fault: str, *, armed: bool = True, **overrides: object) -> Cluster:
    config = scenario_config(fault, **overrides)  # type: ignore[arg-type]
    if not armed:  # the same deployment and traffic on the fixed path
        config = scenario_config(fault, faults=(), **overrides)  # type: ignore[arg-type]
    return Cluster(config)


def _rank(c: Cluster, fault: str) -> Scheduler:
    return next(r for r in c.schedulers if r.faults.fired[fault])


def _until(c: Cluster, cond: Callable[[], bool], steps: int) -> bool:
    return c.run_until(cond, steps)


def _balanced(r: Scheduler) -> None:
    """Every pool's books balance and every full-KV page id is owned exactly once."""
    assert all(g == 0 for g in gaps(r).values()), gaps(r)
    assert full_census(r).clean


def test_every_blind_fault_is_tested_here() -> None:
    assert set(BLIND) == {
        "hicache-unlock-without-lock", "hicache-write-acks-undrained", "pd-prefill-stranded-kv",
        "pd-decode-stranded-kv", "decode-offload-acks-behind-retract", "decode-offload-protected-drift",
        "radix-evictable-overcount", "encoder-waiting-holds-entries",
    }  # fmt: skip


# --- stranded holds -------------------------------------------------------------------------------


def test_a_prefill_keeps_the_kv_of_a_request_its_decode_side_dropped_for_ever() -> None:
    """S20 / V05: the sender has no timeout once it has sent; the hold is balanced, and never ends."""
    name = "pd-prefill-stranded-kv"
    c = _cluster(name)
    prefill = c.by_role("prefill")[0].ranks[0]
    assert _until(c, lambda: bool(truth.stranded(prefill)), 2000)
    first = truth.stranded(prefill)[0]
    assert first.where == "disagg_prefill_inflight_queue"
    assert first.tokens > 0
    assert first.owner in {r.rid for r in prefill.disagg_prefill_inflight_queue}
    c.run_for(30.0)
    holds = truth.stranded(prefill)
    assert first.owner in {h.owner for h in holds}  # 30 s on, still held
    assert sum(h.tokens for h in holds) >= first.tokens
    for r in c.schedulers:
        _balanced(r)
    assert not c.crashed


def test_a_decode_holds_preallocated_kv_for_a_lost_transfer_until_its_waiting_timeout() -> None:
    """V02 / S06's shape: the receiver waits for KV that never comes, then times out (SGLang's
    SGLANG_DISAGGREGATION_WAITING_TIMEOUT; vLLM NixlPush has none)."""
    name = "pd-decode-stranded-kv"
    c = _cluster(name, waiting_timeout_s=30.0)
    decode = c.by_role("decode")[0].ranks[0]
    assert _until(c, lambda: bool(truth.stranded(decode)), 2000)
    first = truth.stranded(decode)[0]
    assert first.where == "disagg_decode_transfer_queue"
    _balanced(decode)
    c.run_for(10.0)
    assert first.owner in {h.owner for h in truth.stranded(decode)}
    c.run_for(25.0)
    assert first.owner not in {h.owner for h in truth.stranded(decode)}  # given up after 30 s
    log = "\n".join(c.by_role("decode")[0].log_lines())
    assert f"req.rid='{first.owner}' with exception KVTransferError: timed out" in log
    for r in c.schedulers:
        _balanced(r)


def test_write_through_acks_left_undrained_in_pure_decode_keep_tree_nodes_locked() -> None:
    """S14 (<= 0.5.9): only the prefill batch builder drains the acks; while only decode runs the
    written nodes stay locked (evictable moves to protected), balanced, until a prefill comes."""
    name = "hicache-write-acks-undrained"
    c = _cluster(name)
    r = c.schedulers[0]
    assert _until(c, lambda: bool(truth.stranded(r)), 3000)
    holds = truth.stranded(r)
    assert all(h.owner == "write-through" and h.where.startswith("tree node ") for h in holds)
    assert not r.waiting_queue
    assert r.running_batch.reqs
    _balanced(r)
    locked = sum(h.tokens for h in holds)
    assert r.tree_cache.protected_size() >= locked
    fixed = _cluster(name, armed=False)
    for _ in range(1500):
        fixed.step()
        assert not truth.stranded(fixed.schedulers[0])


def test_the_undrained_acks_fault_is_refused_on_a_release_that_drains_them() -> None:
    with pytest.raises(ValueError, match=r"cannot be injected on 0\.5\.12"):
        _cluster("hicache-write-acks-undrained", version="0.5.12")


def test_finished_requests_wait_for_offload_acks_nobody_checks_while_a_request_is_retracted() -> None:
    """0.5.4.post1's decode offload (fixed by PR #11656): the acks are checked only when nothing is
    retracted; finished requests keep their KV, the retracted wait for room they hold."""
    name = "decode-offload-acks-behind-retract"
    c = _cluster(name)
    decode = c.by_role("decode")[0].ranks[0]
    assert _until(c, lambda: len(truth.stranded(decode)) >= 3, 3000)
    holds = truth.stranded(decode)
    assert {h.where for h in holds} == {"decode_offload_manager.ongoing_offload"}
    assert decode.disagg_decode_prealloc_queue.retracted_queue
    _balanced(decode)
    owners = {h.owner for h in holds}
    c.run_for(30.0)
    assert owners <= {h.owner for h in truth.stranded(decode)}  # nobody let go
    fixed = _cluster(name, armed=False)
    fixed_decode = fixed.by_role("decode")[0].ranks[0]
    for _ in range(1500):
        fixed.step()
        assert not truth.stranded(fixed_decode)
    assert fixed_decode.emu_finished_total > 0


# --- a lock no live request holds -----------------------------------------------------------------


def test_an_unlock_without_its_lock_unprotects_a_live_prefix_and_its_slots_are_freed_under_it() -> None:
    """O12 / S13's class: dec_lock_ref on a node never inc'd. The books balance (the tree still
    holds every id), but a live request's prefix becomes evictable and is freed while it reads it."""
    name = "hicache-unlock-without-lock"
    c = _cluster(name)
    assert _until(c, lambda: any(r.faults.fired[name] for r in c.schedulers), 2000)
    r = _rank(c, name)
    assert _until(c, lambda: truth.lock_deficit(r) > 0, 200)  # at the write's ack
    _balanced(r)
    assert _until(c, lambda: truth.prefix_freed(r) > 0 or bool(c.crashed), 2000)
    assert truth.prefix_freed(r) > 0
    fixed = _cluster(name, armed=False)
    fr = fixed.schedulers[0]
    for i in range(600):
        fixed.step()
        if i % 5 == 0:  # the walks are the costly part
            assert truth.lock_deficit(fr) == 0
            assert truth.prefix_freed(fr) == 0
    assert not fixed.crashed


# --- counter bugs: every id is right, a counter lies ----------------------------------------------


COUNTER_BUGS = [
    ("decode-offload-protected-drift", "protected_size_"),
    ("radix-evictable-overcount", "full_evictable_size_"),
]


@pytest.mark.parametrize(("name", "counter"), COUNTER_BUGS)
def test_a_counter_bug_unbalances_the_counters_while_every_id_is_where_it_belongs(
    name: str, counter: str
) -> None:
    """S12 (protected never taken off at the offload's release) and #35270 (evictable over-counted at
    eviction): SGLang's own check sees a surplus, yet no slot is free twice -- the census is clean."""
    c = _cluster(name)
    assert _until(c, lambda: any(r.faults.fired[name] for r in c.schedulers), 3000)
    r = _rank(c, name)
    drift = truth.counter_drift(r)
    assert set(drift) == {counter}
    assert drift[counter] > 0
    assert gaps(r)[Pool.FULL] == -drift[counter]  # the whole gap is the counter's lie
    assert full_census(r).clean  # no id is free twice, none is lost
    fixed = _cluster(name, armed=False)
    for _ in range(800):
        fixed.step()
        for fr in fixed.schedulers:
            assert truth.counter_drift(fr) == {}


def test_the_protected_drift_grows_with_every_release_of_the_offload() -> None:
    name = "decode-offload-protected-drift"
    c = _cluster(name, trigger="@p=1")
    decode = c.by_role("decode")[0].ranks[0]
    assert _until(c, lambda: decode.faults.fired[name] >= 3, 3000)
    drift = truth.counter_drift(decode)["protected_size_"]
    c.run_for(20.0)
    assert truth.counter_drift(decode)["protected_size_"] > drift
    assert full_census(decode).clean


# --- the encoder cache (vLLM's managers) ----------------------------------------------------------


def test_the_encoder_decoder_cache_credits_its_slots_on_every_step_and_outgrows_its_size() -> None:
    """V15: free_encoder_input credits num_free_slots on every decode step."""
    name = "encoder-credit-per-step"
    c = _cluster(name)
    r = c.schedulers[0]
    assert _until(c, lambda: r.faults.fired[name] > 0, 2000)
    assert encoder_gap(r) is not None
    assert encoder_gap(r) < 0
    m = r.encoder_cache_manager
    assert _until(c, lambda: m.num_free_slots > m.cache_size, 2000)
    assert all(g == 0 for g in gaps(r).values())  # the KV pools are fine
    fixed = _cluster(name, armed=False)
    for _ in range(800):
        fixed.step()
        assert encoder_gap(fixed.schedulers[0]) == 0
    assert fixed.schedulers[0].emu_finished_total > 0


def test_entries_held_by_waiting_requests_stall_admission_with_kv_free() -> None:
    """V16: a request left waiting keeps the encoder-cache entries it took; a chunked request then
    cannot get its next image, and nothing is admitted while the KV pool has room."""
    name = "encoder-waiting-holds-entries"
    c = _cluster(name)
    r = c.schedulers[0]
    stalled = lambda: not r.running_batch.reqs and len(r.waiting_queue) > 10  # noqa: E731
    assert _until(c, stalled, 3000)
    free, size, pinned = truth.encoder_state(r) or (0, 0, 0)
    assert pinned > 0
    assert free < size
    chunked = r.chunked_req
    assert chunked is not None  # the request whose next image finds no room
    progress = (r.emu_finished_total, len(chunked.prefix_indices))
    c.run_for(30.0)
    assert stalled()
    assert r.chunked_req is chunked
    assert (r.emu_finished_total, len(chunked.prefix_indices)) == progress
    kv_room = r.token_to_kv_pool_allocator.available_size() + r.tree_cache.evictable_size()
    assert kv_room > len(r.waiting_queue[0].origin_input_ids)
    _balanced(r)
    assert encoder_gap(r) == 0
    fixed = _cluster(name, armed=False)
    fixed.run_for(120.0)
    assert fixed.schedulers[0].emu_finished_total > 20
