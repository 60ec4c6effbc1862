"""SGLang 0.5.4.x: MambaRadixCache, HybridReqToTokenPool.free(idx, free_mamba_cache=True)."""

from __future__ import annotations

import functools
import shutil
import tempfile
from dataclasses import replace
from typing import Any

import torch
from check_release import CONFIG, Batch, Driver, gaps, report
from guard_flow import guard_checks
from incident_flow import incident_checks
from long_poll import LongPoll
from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape
from sglang.srt.disaggregation.prefill import SchedulerDisaggregationPrefillMixin
from sglang.srt.disaggregation.utils import DisaggregationMode
from sglang.srt.managers.schedule_batch import FINISH_LENGTH, Req
from sglang.srt.managers.scheduler import Scheduler
from sglang.srt.managers.scheduler_runtime_checker_mixin import SchedulerRuntimeCheckerMixin
from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
from sglang.srt.mem_cache.mamba_radix_cache import MambaRadixCache
from sglang.srt.mem_cache.memory_pool import HybridReqToTokenPool
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.sampling.sampling_params import SamplingParams

from poolwatch.codec.snapshot import parse_snapshot
from poolwatch.discovery.files import ensure_secret, read_secret
from poolwatch.discovery.final import read_final_dir
from poolwatch.model.findings import TripwireKind
from poolwatch.model.rank import Phase, Pool
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.last_word import Outcome
from poolwatch.probe.lifecycle import detach, install, probe_of, uninstall
from poolwatch.probe.sglang.engine import SGLANG
from poolwatch.probe.sglang.final import residual

KV, MAMBA, ROWS = 256, 12, 4


class Holder:
    """A scheduler-shaped object over real pools, with SGLang's own check and chunk methods."""

    _get_mamba_token_info = Scheduler._get_mamba_token_info
    _check_mamba_memory = SchedulerRuntimeCheckerMixin._check_mamba_memory
    _check_req_pool = SchedulerRuntimeCheckerMixin._check_req_pool
    check_memory = SchedulerRuntimeCheckerMixin.check_memory  # SGLang's strict idle check (raises)
    process_prefill_chunk = SchedulerDisaggregationPrefillMixin.process_prefill_chunk
    enable_metrics = False

    def __init__(self, mode: str, mamba: int = MAMBA) -> None:
        shape = Mamba2StateShape.create(
            tp_world_size=1,
            intermediate_size=32,
            n_groups=1,
            num_heads=2,
            head_dim=16,
            state_size=4,
            conv_kernel=4,
        )
        self.req_to_token_pool = HybridReqToTokenPool(
            size=ROWS,
            mamba_size=mamba,
            max_context_len=128,
            device="cpu",
            enable_memory_saver=False,
            cache_params=Mamba2CacheParams(shape=shape, layers=[0]),
        )
        self.token_to_kv_pool_allocator = TokenToKVPoolAllocator(
            KV, torch.float16, "cpu", None, need_sort=mode != "null"
        )
        self.tree_cache = MambaRadixCache(
            self.req_to_token_pool, self.token_to_kv_pool_allocator, page_size=1
        )
        self.max_total_num_tokens = KV
        self.is_hybrid, self.is_hybrid_gdn = False, True
        self.disaggregation_mode = DisaggregationMode(mode)
        self.running_batch = Batch([], ForwardMode.DECODE)
        self.last_batch: Any = None
        self.chunked_req: Any = None
        self.waiting_queue: list[Any] = []
        self.grammar_queue: list[Any] = []
        self.disagg_prefill_inflight_queue: list[Any] = []
        self.disagg_prefill_bootstrap_queue = Batch([], None)
        self.disagg_prefill_bootstrap_queue.queue = []  # type: ignore[attr-defined]
        self.enable_overlap = False
        self.page_size, self.tp_rank, self.pp_rank, self.dp_rank = 1, 0, 0, None

    def recv_requests(self) -> list[Any]:
        return []

    def self_check_during_idle(self) -> tuple[bool, str]:
        return self._check_mamba_memory()

    def _publish_kv_events(self) -> None:
        return None


class Driver054(Driver):
    version = "0.5.4.post1"
    mamba_size = MAMBA

    def new(self, mode: str = "null") -> Holder:
        install(SGLANG, Holder, CONFIG)
        self.sched = Holder(mode, self.mamba_size)
        return self.sched

    def finish_transferred(self, req: Req) -> None:
        """The PD prefill release after the KV transfer (the request is in no batch)."""
        req.finished_reason = FINISH_LENGTH(0)
        self.sched.tree_cache.cache_finished_req(req)

    def chunk_step(self) -> None:
        """SGLang's own process_prefill_chunk (overlap on: no transfer engine here)."""
        self.sched.enable_overlap = True
        self.sched.process_prefill_chunk()
        self.sched.enable_overlap = False

    def fixed_step(self) -> None:
        """The chunk step as PR #12994 fixed it: the row is freed, the Mamba slot kept."""
        pool = self.sched.req_to_token_pool
        pool.free = functools.partial(type(pool).free, pool, free_mamba_cache=False)
        try:
            self.chunk_step()
        finally:
            del pool.free

    def strict_check(self) -> None:
        """SGLang's own check_memory: raises ValueError on a leak, as the server does."""
        self.sched.check_memory()

    def scenario_guard(self) -> None:
        self.mamba_size = 32
        try:
            guard_checks(
                self,
                buggy=True,
                strict_check=self.strict_check,
                chunk_step=self.chunk_step,
                fixed_step=self.fixed_step,
            )
        finally:
            self.mamba_size = MAMBA

    def scenario_incident(self) -> None:
        """The seed's alert text and incident bundle name SGLang's own freeing line (incident_flow.py)."""
        incident_checks(self)

    def arrive(self, rid: str, ids: list[int], max_new: int = 4) -> Req:
        return Req(rid, "", ids, SamplingParams(max_new_tokens=max_new))

    def prefill(self, reqs: list[Req], chunk: int | None = None) -> Batch:
        """init_next_round_input + PrefillAdder + prepare_for_extend, then the forward."""
        s = self.sched
        for req in reqs:
            if req is s.chunked_req:  # a continuing chunk keeps the prefix cache_unfinished_req set
                req.init_next_round_input()
            else:
                req.init_next_round_input(s.tree_cache)
                s.tree_cache.inc_lock_ref(req.last_node)
            if chunk is not None:
                req.fill_ids = req.fill_ids[: len(req.prefix_indices) + chunk]
                s.chunked_req = req if len(req.fill_ids) < len(req.origin_input_ids) else None
            row = s.req_to_token_pool.alloc(1, [req])[0]
            req.req_pool_idx = row
            pre, fill = len(req.prefix_indices), len(req.fill_ids)
            s.req_to_token_pool.write((row, slice(0, pre)), req.prefix_indices)
            s.req_to_token_pool.write((row, slice(pre, fill)), s.token_to_kv_pool_allocator.alloc(fill - pre))
        batch = Batch(reqs, ForwardMode.EXTEND)
        s.last_batch = batch
        return batch

    def prefill_done(self, batch: Batch) -> None:
        """process_batch_result_prefill: one token for finished prompts, cached unfinished."""
        s = self.sched
        for req in batch.reqs:
            if req is s.chunked_req:
                continue
            req.output_ids.append(7)
            s.tree_cache.cache_unfinished_req(req)
            s.running_batch.reqs.append(req)

    def decode(self) -> None:
        s = self.sched
        for req in s.running_batch.reqs:
            pos = len(req.origin_input_ids) + len(req.output_ids) - 1
            s.req_to_token_pool.write(
                (req.req_pool_idx, slice(pos, pos + 1)), s.token_to_kv_pool_allocator.alloc(1)
            )
            req.output_ids.append(8)
        s.running_batch.forward_mode = ForwardMode.DECODE
        s.last_batch = s.running_batch

    def evict(self, *, tokens: int, mamba: int) -> None:
        self.sched.tree_cache.evict(tokens)
        self.sched.tree_cache.evict_mamba(mamba)

    def finish(self, req: Req) -> None:
        req.finished_reason = FINISH_LENGTH(len(req.output_ids))
        self.sched.tree_cache.cache_finished_req(req)
        self.sched.running_batch.reqs.remove(req)

    def chunk_boundary(self) -> None:
        """0.5.4 get_next_batch_to_run (non-PD): the row is freed, the Mamba slot kept."""
        s = self.sched
        s.tree_cache.cache_unfinished_req(s.chunked_req, chunked=True)
        s.req_to_token_pool.free(s.chunked_req.req_pool_idx, free_mamba_cache=False)

    def idle_agrees(self, label: str) -> bool:
        s = self.sched
        snap = self.boundary()
        leak, _msg = s.self_check_during_idle()
        try:
            s._check_req_pool()
            rows_ok = True
        except ValueError:
            rows_ok = False
        info = s._get_mamba_token_info()
        full, mamba = snap.pools[Pool.FULL], snap.pools[Pool.MAMBA]
        same = (full.available, full.evictable, mamba.available, mamba.evictable) == (
            info[4],
            info[5],
            info[6],
            info[7],
        )
        sglang_gap = {
            "full": info[0] - s.tree_cache.full_protected_size(),
            "mamba": info[1] - s.tree_cache.mamba_protected_size(),
        }
        probe_gap = gaps(snap)
        report(
            f"{label}: at idle the probe reads SGLang's own figures and agrees with its check",
            snap.phase is Phase.IDLE
            and same
            and (leak == any(probe_gap.values()))
            and rows_ok == (probe_gap["req"] == 0)
            and probe_gap["full"] == sglang_gap["full"]
            and probe_gap["mamba"] == sglang_gap["mamba"],
            {
                "phase": snap.phase.value,
                "probe": probe_gap,
                "sglang": sglang_gap,
                "sglang_leak": leak,
                "rows_ok": rows_ok,
            },
        )
        return leak

    # -- scenarios -----------------------------------------------------------------------------

    def scenario_busy_then_idle(self) -> None:
        self.new()
        a = self.arrive("a", list(range(12)))
        self.prefill_done(self.prefill([a]))
        self.expect_balanced("prefill of a")
        self.decode()
        self.expect_balanced("decode of a")
        b = self.arrive("b", [*range(9), 50, 51])  # shares a's first 9 tokens through the tree
        self.prefill_done(self.prefill([b]))
        self.expect_balanced("prefill of b on a's prefix")
        self.decode()
        self.decode()
        self.expect_balanced("decode of a and b")
        w = self.arrive("w", [*range(12), 60])  # matches a's cached node, which has a Mamba state
        w.init_next_round_input(self.sched.tree_cache)  # considered, not admitted: a COW Mamba slot
        self.sched.waiting_queue.append(w)
        self.expect_balanced("a waiting request holding a copy-on-write slot")
        self.finish(a)
        self.expect_balanced("a finished")
        self.finish(b)
        self.sched.waiting_queue.remove(w)
        report("the waiting request got a copy-on-write slot", w.mamba_pool_idx is not None)
        if w.mamba_pool_idx is not None:
            self.sched.req_to_token_pool.mamba_pool.free(w.mamba_pool_idx.reshape(1))
        self.sched.last_batch = None
        self.idle_agrees("after a and b")
        before = self.sched.tree_cache.full_evictable_size(), self.sched.tree_cache.mamba_evictable_size()
        self.evict(tokens=5, mamba=1)
        after = self.sched.tree_cache.full_evictable_size(), self.sched.tree_cache.mamba_evictable_size()
        report(
            "eviction freed KV and Mamba slots",
            after[0] < before[0] and after[1] < before[1],
            [before, after],
        )
        self.idle_agrees("after evicting")

    def scenario_chunked(self) -> None:
        self.new()
        c = self.arrive("c", list(range(100, 130)))
        batch = self.prefill([c], chunk=8)
        self.expect_balanced("chunk 1 of c")
        self.chunk_boundary()
        self.prefill([c], chunk=8)
        self.expect_balanced("chunk 2 of c")
        self.chunk_boundary()
        batch = self.prefill([c], chunk=64)
        self.prefill_done(batch)
        self.expect_balanced("last chunk of c")
        self.finish(c)
        self.sched.last_batch = None
        self.idle_agrees("after the chunked request")

    def scenario_seed(self) -> None:
        """PD prefill, chunked: the real process_prefill_chunk frees the row with the default
        free_mamba_cache=True, so the chunked request's Mamba slot goes back on the free list."""
        self.new("prefill")
        c = self.arrive("c", list(range(200, 230)))
        self.prefill([c], chunk=8)
        slot = int(c.mamba_pool_idx)
        self.sched.enable_overlap = True  # defer the KV send: there is no transfer engine here
        self.sched.process_prefill_chunk()
        self.sched.enable_overlap = False
        probe = self.sched._poolwatch_probe
        wires = (
            [(t.kind, t.pool, t.slots, t.first_seen_hook) for t in probe.latest.tripwires]
            if probe.latest
            else []
        )
        report(
            "seed: the tripwire names the chunked request's Mamba slot right after process_prefill_chunk",
            (TripwireKind.FREE_AND_LIVE, Pool.MAMBA, (slot,), "process_prefill_chunk") in wires,
            {"slot": slot, "tripwires": [str(w) for w in wires]},
        )
        self.prefill([c], chunk=8)
        snap = self.boundary()
        report(
            "seed: at the next loop boundary the Mamba pool shows a surplus, the full pool balances",
            gaps(snap)["mamba"] is not None
            and gaps(snap)["mamba"] < 0
            and gaps(snap)["full"] == 0
            and gaps(snap)["req"] == 0,
            gaps(snap),
        )
        # the rest of the request, as the PD prefill loop runs it: more boundaries, the last chunk,
        # the transfer (inflight queue), then the release that SGLang's idle check judges
        self.sched.enable_overlap = True
        self.sched.process_prefill_chunk()
        self.sched.enable_overlap = False
        last = self.prefill([c], chunk=64)
        self.sched.tree_cache.cache_unfinished_req(c)
        self.sched.disagg_prefill_inflight_queue.append(c)
        self.boundary()
        self.sched.disagg_prefill_inflight_queue.remove(c)
        c.finished_reason = FINISH_LENGTH(0)
        self.sched.tree_cache.cache_finished_req(c)
        self.sched.last_batch = None
        del last
        leak = self.idle_agrees("seed at idle")
        report("seed: SGLang's own idle check finds the leak the probe reported while busy", leak)

    def seed_to_idle_check(self, s: Holder) -> None:
        """The seed flow as 0.5.4's PD prefill loop ends it: the last chunk's batch is transferred
        and released within one iteration, so SGLang's idle check runs while ``last_batch`` still
        holds it (the loop clears it only after the check) and the probe's own phase says busy.
        Ends with the idle hook (the probe looks first), just before SGLang's check_memory."""
        c = self.arrive("c", list(range(200, 230)))
        self.prefill([c], chunk=8)
        s.recv_requests()
        s.enable_overlap = True
        s.process_prefill_chunk()  # the seed: the chunked request's Mamba slot goes back
        self.prefill([c], chunk=8)
        s.recv_requests()
        s.process_prefill_chunk()
        s.enable_overlap = False
        last = self.prefill([c], chunk=64)  # the last chunk: last_batch holds it
        s.recv_requests()
        s.tree_cache.cache_unfinished_req(c)
        c.finished_reason = FINISH_LENGTH(0)
        s.tree_cache.cache_finished_req(c)  # transferred and released in this iteration
        report("seed final: last_batch still holds the batch at SGLang's check", s.last_batch is last)
        s.self_check_during_idle()

    def check_memory_raises(self) -> bool:
        try:
            self.strict_check()
        except ValueError:
            return True
        return False

    def scenario_seed_final(self) -> None:
        """The seed flow at the production sampling rates, no endpoint: the final snapshot must be
        on disk, naming the Mamba surplus, before SGLang's check_memory raises."""
        directory = tempfile.mkdtemp(prefix="poolwatch-final-")
        production = replace(ProbeConfig.from_env({}), serve=False, directory=directory, release=self.version)
        uninstall(Holder)
        install(SGLANG, Holder, production)
        try:
            self.sched = s = Holder("prefill", self.mamba_size)
            self.seed_to_idle_check(s)
            finals = read_final_dir(directory, read_secret(directory) or "")
            raised = self.check_memory_raises()
            snap = parse_snapshot(finals[0][1]) if finals else None
            mamba = residual(Pool.MAMBA, snap.pools[Pool.MAMBA]) if snap is not None else None
            report(
                "seed final, production rates: the final snapshot names the Mamba surplus before "
                "SGLang's check raises",
                raised and snap is not None and snap.final and mamba is not None and mamba < 0,
                {"raised": raised, "finals": [n for n, _ in finals], "mamba_residual": mamba},
            )
        finally:
            uninstall(Holder)
            shutil.rmtree(directory, ignore_errors=True)

    def scenario_seed_last_word(self) -> None:
        """The same flow with the probe serving (production rates, the default last-word bound) and
        a collector long-polling its endpoint as the sidecar does: the doomed rank holds until the
        final snapshot was handed over, so the collector has it before SGLang's check raises."""
        directory = tempfile.mkdtemp(prefix="poolwatch-lastword-")
        served = replace(ProbeConfig.from_env({}), serve=True, directory=directory, release=self.version)
        uninstall(Holder)
        install(SGLANG, Holder, served)
        collector: LongPoll | None = None
        try:
            self.sched = s = Holder("prefill", self.mamba_size)
            s.recv_requests()  # the first hook: the endpoint starts
            probe = probe_of(s)
            assert probe is not None
            assert probe.publisher is not None
            assert probe.publisher.server is not None
            collector = LongPoll(probe.publisher.server.url, ensure_secret(directory))
            collector.start()
            attended = collector.wait_attended(probe.publication)
            self.seed_to_idle_check(s)
            handed = list(collector.snapshots)  # what the collector had when SGLang's check ran
            raised = self.check_memory_raises()
            finals = [snap for snap in handed if snap.final]
            mamba = residual(Pool.MAMBA, finals[-1].pools[Pool.MAMBA]) if finals else None
            report(
                "seed final, probe serving: the collector was handed the final snapshot naming the "
                "Mamba surplus before SGLang's check raised (the last word waited)",
                attended
                and raised
                and probe.last_word is Outcome.COLLECTED
                and mamba is not None
                and mamba < 0,
                {
                    "attended": attended,
                    "raised": raised,
                    "last_word": str(probe.last_word),
                    "seqs_handed": [snap.seq for snap in handed],
                    "mamba_residual": mamba,
                },
            )
        finally:
            if collector is not None:
                collector.stop()
            detach(self.sched)
            uninstall(Holder)
            shutil.rmtree(directory, ignore_errors=True)

    # the release's process_prefill_chunk frees the chunked request's Mamba slot (#12432)
    seed_live = True
    # the seed-final scenario drives 0.5.4's own scheduler order (its check runs while last_batch
    # still holds the finished batch) with 0.5.4's Holder; later families' drivers leave it out
    checks_with_last_batch_set = True

    def scenarios(self) -> list[tuple[str, Any]]:
        final = [
            ("seed final snapshot", self.scenario_seed_final),
            ("seed last word", self.scenario_seed_last_word),
        ]
        if not self.checks_with_last_batch_set:
            final = []
        return [
            ("busy then idle", self.scenario_busy_then_idle),
            ("chunked prefill", self.scenario_chunked),
            ("seed double free", self.scenario_seed),
            *final,
            ("guard mode", self.scenario_guard),
            *([("incident bundle", self.scenario_incident)] if self.seed_live else []),
        ]
