"""The scheduler's steps on one rank of an SGLang release, in that release's API (run in its venv).

One :class:`Driver` for every release of :mod:`rigs.sglang.releases`: it moves real ``Req`` objects
through the release's own pools and tree the way the release's scheduler does -- the prefix match
(``init_next_round_input``), the tree lock, the row, the KV, the chunk boundary, decode, the release
of a finished, aborted or retracted request, eviction -- and where releases differ it reads the
table (``alloc(n, reqs)`` / ``alloc(reqs)``, ``kv_*_len`` on the request or on ``req.kv``,
``cache_unfinished_req`` or 0.5.23's ``checkpoint_kv_cache`` / ``release_kv_cache``, ``evict``'s
two signatures).  :meth:`Driver.new` makes a rank with the probe attached as it is deployed --
installed on the rank's class, each instance born with a probe -- and :meth:`Driver.boundary` is
one turn of the event loop (the release's loop hook, so the probe samples there).  Engine steps
are counted (``steps``), for :mod:`rigs.timeline`.
"""

from __future__ import annotations

import array
from dataclasses import replace
from typing import Any

from poolwatch.conservation import gap
from poolwatch.model.snapshot import Snapshot
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.probe import Probe
from poolwatch.probe.lifecycle import install, probe_of, uninstall
from poolwatch.probe.sglang.engine import SGLANG
from rigs.sglang.rank import Batch, Rank, publish_server_args, rank_class
from rigs.sglang.releases import Check, Release, release

__all__ = ["CONFIG", "Driver", "gaps"]

# every hook samples and every census is due: a test sees each step (deployed: ProbeConfig.from_env)
CONFIG = ProbeConfig(
    sample_interval_s=0.0,
    census_interval_s=0.0,
    kv_census_interval_s=0.0,
    idle_kv_census_gap_s=0.0,
    serve=False,
    directory="/nonexistent-poolwatch-dir",
)


def gaps(snap: Snapshot) -> dict[str, int | None]:
    """Each pool's signed conservation gap in ``snap``."""
    return {p.value: gap(a) for p, a in snap.pools.items()}


class Driver:
    """The steps of one release's scheduler on the rank :meth:`new` made (``sched``)."""

    def __init__(self, version: str | Release, config: ProbeConfig = CONFIG) -> None:
        self.release = version if isinstance(version, Release) else release(version)
        self.config = config
        self.sched: Any = None
        self.samples: list[Snapshot] = []
        self.steps = 0  # loop boundaries of the current rank

    # -- the rank and its probe ------------------------------------------------------------------

    def new(
        self,
        mode: str = "null",
        *,
        guard: bool = False,
        config: ProbeConfig | None = None,
        checkpoints: bool = False,
        **sizes: int,
    ) -> Rank:
        """A fresh rank (``mode``: ``null``, ``prefill`` or ``decode``) born with a probe of
        ``config`` (the driver's, guard on or off), the release told; ``checkpoints``: with SGLang's
        int8 Mamba checkpoint pool (0.5.23)."""
        publish_server_args(self.release)
        cls = rank_class(self.release)
        uninstall(cls)
        install(SGLANG, cls, replace(config or self.config, guard=guard, release=self.release.version))
        self.sched = cls(mode, **sizes)
        if checkpoints:
            self._checkpoint_pool()
        self.samples, self.steps = [], 0
        return self.sched  # type: ignore[no-any-return]

    def _checkpoint_pool(self) -> None:
        """SGLang's own int8 Mamba checkpoint pool (what ``--enable-int8-mamba-checkpoint`` builds;
        set directly: no global server-args context)."""
        from sglang.srt.mem_cache.mamba_checkpoint_pool import MambaCheckpointPool

        params = self.sched.cache_params
        heads, d_v, d_k = params.shape.temporal
        self.sched.req_to_token_pool.mamba_ckpt_pool = MambaCheckpointPool(
            num_layers=1,
            num_slots=2 * self.sched.mamba_size,
            num_heads=heads,
            head_v_dim=d_v,
            head_k_dim=d_k,
            conv_shapes=list(params.shape.conv),
            conv_dtype=params.dtype.conv,
            device="cpu",
            temporal_dtype=params.dtype.temporal,
        )

    @property
    def probe(self) -> Probe:
        probe = probe_of(self.sched)
        assert probe is not None, "the rank has no probe"
        return probe

    def loop(self) -> None:
        """One turn of the event loop: the release's loop hook (the probe looks before it, at the
        rates of its config)."""
        getattr(self.sched, self.release.loop_hook)()
        self.steps += 1

    def boundary(self) -> Snapshot:
        """One turn of the event loop, and the snapshot the probe took there (every hook samples at
        :data:`CONFIG`'s rates)."""
        self.loop()
        snap = self.probe.latest
        assert snap is not None
        self.samples.append(snap)
        return snap

    def actions(self) -> list[tuple[str, str, int, str]]:
        """What guard did so far: (kind, pool, count, hook) per repair or refusal."""
        snap = self.probe.latest
        return [(r.kind.value, r.pool.value, r.count, r.hook) for r in snap.repairs] if snap else []

    # -- requests --------------------------------------------------------------------------------

    def arrive(self, rid: str, ids: list[int], max_new: int = 4) -> Any:
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.sampling.sampling_params import SamplingParams

        req = Req(rid, "", ids, SamplingParams(max_new_tokens=max_new))
        if self.release.unified_tree:  # release_kv_cache appends output_ids' array to it
            req.origin_input_ids = array.array(req.output_ids.typecode, req.origin_input_ids)
        return req

    def record(self, req: Any) -> Any:
        """The object holding the request's row, Mamba slot and ``kv_*_len`` (0.5.23: ``req.kv``)."""
        return req.kv if self.release.kv_lens == "req.kv" else req

    def allocated(self, req: Any) -> int:
        """How many KV slots the request's row holds."""
        if self.release.kv_lens:
            return int(self.record(req).kv_allocated_len)
        return len(req.origin_input_ids) + len(req.output_ids) - 1

    @property
    def mamba_free(self) -> Any:
        """The object whose ``free_slots`` is the Mamba free list (``mamba_pool`` or 0.5.23's
        ``mamba_allocator``)."""
        pool = self.sched.req_to_token_pool
        return pool.mamba_allocator if self.release.mamba_allocator else pool.mamba_pool

    def _room(self, tokens: int) -> None:
        """What the scheduler's allocation helpers do first: evict the tree until ``tokens`` KV slots
        and two Mamba slots (a request's and a copy-on-write one) are free."""
        short_kv = tokens - self.sched.token_to_kv_pool_allocator.available_size()
        short_mamba = 2 - self.mamba_free.available_size()
        if short_kv > 0 or short_mamba > 0:
            self.evict(tokens=max(short_kv, 0), mamba=max(short_mamba, 0))

    def prefill(self, reqs: list[Any], chunk: int | None = None) -> Batch:
        """init_next_round_input + the adder + prepare_for_extend (``chunk``: this many new tokens,
        the request becoming the chunked one while its prompt is not done), then the forward."""
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        for req in reqs:
            (self._extend if self.release.unified_tree else self._prefill_one)(req, chunk)
        batch = Batch(reqs, ForwardMode.EXTEND)
        self.sched.last_batch = batch
        return batch

    def _prefill_one(self, req: Any, chunk: int | None) -> None:
        s, lens = self.sched, self.release.kv_lens
        self._room(len(req.origin_input_ids) + 8)
        if req is s.chunked_req:  # a continuing chunk keeps the prefix cache_unfinished_req set
            req.init_next_round_input()
        else:
            req.init_next_round_input(s.tree_cache)
            s.tree_cache.inc_lock_ref(req.last_node)
        if chunk is not None:
            req.fill_ids = req.fill_ids[: len(req.prefix_indices) + chunk]
        if chunk is not None or req is s.chunked_req:
            s.chunked_req = req if len(req.fill_ids) < len(req.origin_input_ids) else None
        pre, fill = len(req.prefix_indices), len(req.fill_ids)
        if self.release.legacy:
            req.req_pool_idx = s.req_to_token_pool.alloc(1, [req])[0]
            row = int(req.req_pool_idx)
        else:
            req.extend_input_len = fill - pre
            row = int(s.req_to_token_pool.alloc([req])[0])
        s.req_to_token_pool.write((row, slice(0, pre)), req.prefix_indices)
        s.req_to_token_pool.write((row, slice(pre, fill)), s.token_to_kv_pool_allocator.alloc(fill - pre))
        if lens:
            req.kv_committed_len = req.kv_allocated_len = fill
        if not self.release.legacy and s.chunked_req is req:
            req.is_chunked += 1

    def _extend(self, req: Any, chunk: int | None) -> None:
        """0.5.23's prepare_for_extend: the match and the lock (a new request), the row, the prefix
        and the new KV up to ``chunk`` tokens past the prefix (the whole prompt without ``chunk``)."""
        s = self.sched
        self._room(len(req.origin_input_ids) + 8)
        if not req.kv.holds_kv:
            req.init_next_round_input(s.tree_cache)
            req.lock = s.tree_cache.lock(req.last_node)
        whole, pre = len(req.origin_input_ids), req.prefix_len
        upto = whole if chunk is None else min(pre + chunk, whole)
        row = s.req_to_token_pool.alloc([req])[0]
        if not req.kv.kv_allocated_len and pre:
            s.req_to_token_pool.write((row, slice(0, pre)), s.tree_cache.prefix_device_indices(req))
        start = max(req.kv.kv_allocated_len, pre)
        s.req_to_token_pool.write((row, slice(start, upto)), s.token_to_kv_pool_allocator.alloc(upto - start))
        req.kv.kv_committed_len = req.kv.kv_allocated_len = req.extend_end = upto
        if chunk is not None or req is s.chunked_req:
            s.chunked_req = req if upto < whole else None

    def prefill_done(self, batch: Batch) -> None:
        """process_batch_result_prefill: one token for each finished prompt, which runs on."""
        s = self.sched
        for req in batch.reqs:
            if not self.release.legacy and not self.release.unified_tree and req.is_chunked > 0:
                req.is_chunked -= 1
            if req is s.chunked_req:
                continue
            req.output_ids.append(7)
            if not self.release.unified_tree:
                s.tree_cache.cache_unfinished_req(req)
            s.running_batch.reqs.append(req)
        if self.release.unified_tree:
            s.last_batch = s.running_batch

    def admit(self, req: Any) -> None:
        """The whole prompt prefilled in one batch; the request runs."""
        self.prefill_done(self.prefill([req]))

    def decode(self) -> None:
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        s = self.sched
        self._room(len(s.running_batch.reqs))
        for req in s.running_batch.reqs:
            held, pos = self.record(req), self.allocated(req)
            s.req_to_token_pool.write(
                (held.req_pool_idx, slice(pos, pos + 1)), s.token_to_kv_pool_allocator.alloc(1)
            )
            if self.release.kv_lens:
                held.kv_committed_len = held.kv_allocated_len = pos + 1
            req.output_ids.append(8)
        s.running_batch.forward_mode = ForwardMode.DECODE
        s.last_batch = s.running_batch

    def chunk_boundary(self) -> None:
        """get_next_batch_to_run on a chunked request: the chunk goes to the tree (0.5.23:
        ``checkpoint_kv_cache``); up to 0.5.6 the row goes back, the Mamba slot kept (the fixed step)."""
        s = self.sched
        if self.release.unified_tree:
            from sglang.srt.mem_cache.common import checkpoint_kv_cache

            checkpoint_kv_cache(s.chunked_req, s.tree_cache)
            return
        s.tree_cache.cache_unfinished_req(s.chunked_req, chunked=True)
        if self.release.legacy:
            s.req_to_token_pool.free(s.chunked_req.req_pool_idx, free_mamba_cache=False)

    def chunk_step(self) -> None:
        """SGLang's own ``process_prefill_chunk`` on a PD prefill rank (the KV send deferred, as
        with the overlap scheduler: there is no transfer engine)."""
        self.sched.enable_overlap = True
        try:
            self.sched.process_prefill_chunk()
        finally:
            self.sched.enable_overlap = False

    def send(self, req: Any) -> Snapshot:
        """A PD prefill rank's hand-off of a prompt that is done: its KV sent to the decode rank
        (recorded by the rank) while it waits one loop turn on the inflight queue, then released."""
        s = self.sched
        if not self.release.unified_tree:  # process_batch_result_disagg_prefill caches it first
            s.tree_cache.cache_unfinished_req(req)
        s.send_kv_chunk(req, last_chunk=True)
        s.disagg_prefill_inflight_queue.append(req)
        snap = self.boundary()
        s.disagg_prefill_inflight_queue.remove(req)
        self.finish(req)
        return snap

    def release_req(self, req: Any, *, insert: bool = True) -> None:
        """The release of a finished (``insert``: into the tree) or retracted request, in the
        release's order."""
        s = self.sched
        if req in s.running_batch.reqs:
            s.running_batch.reqs.remove(req)
        if self.release.unified_tree:
            from sglang.srt.mem_cache.common import release_kv_cache

            release_kv_cache(req, s.tree_cache, checkpoint=insert)
            return
        if self.release.insert_flag:
            s.tree_cache.cache_finished_req(req, is_insert=insert)
        else:  # 0.5.4's MambaRadixCache always inserts
            s.tree_cache.cache_finished_req(req)
        if not self.release.legacy:
            start, end = req.pop_overallocated_kv_cache()
            assert start == end
            s.req_to_token_pool.free(req)

    def finish(self, req: Any, *, abort: bool = False) -> None:
        from sglang.srt.managers.schedule_batch import FINISH_ABORT, FINISH_LENGTH

        req.finished_reason = FINISH_ABORT("aborted") if abort else FINISH_LENGTH(len(req.output_ids))
        self.release_req(req, insert=not (abort and self.release.unified_tree))

    def retract(self, req: Any) -> None:
        """retract_decode's release: nothing goes to the tree, the request waits to run again."""
        self.release_req(req, insert=False)
        req.reset_for_retract()
        self.sched.waiting_queue.append(req)

    def evict(self, *, tokens: int, mamba: int) -> None:
        tree = self.sched.tree_cache
        if not self.release.evict_params:
            tree.evict(tokens)
            tree.evict_mamba(mamba)
            return
        from sglang.srt.mem_cache.base_prefix_cache import EvictParams

        if self.release.unified_tree:
            tree.evict(EvictParams(num_tokens=tokens, mamba_num=mamba))
            return
        tree.evict(EvictParams(num_tokens=tokens))
        tree.evict(EvictParams(num_tokens=0, mamba_num=mamba))

    # -- what SGLang itself says ---------------------------------------------------------------

    def idle_leak(self) -> str:
        """SGLang's own idle check of the pools and (up to 0.5.12) the request rows: '' when it
        passes, else its message."""
        leak, message = self.sched.own_check()
        if self.release.check is not Check.CHECKER:
            try:
                self.sched._check_req_pool()
            except ValueError as exc:
                return str(exc)
        return message if leak else ""

    def strict_check(self) -> None:
        """SGLang's idle check as the server runs it: ``ValueError`` on a leak (its own
        ``check_memory``, which raises, up to 0.5.10)."""
        if self.release.check is Check.MAMBA:
            self.sched.check_memory()
            return
        message = self.idle_leak()
        if message:
            raise ValueError("token_to_kv_pool_allocator memory leak detected! " + message)

    def state(self) -> dict[str, Any]:
        """What a later allocation would be handed (the free lists, in order), and the tree's
        counters: two runs in this state behave the same from here."""
        s = self.sched
        alloc, pool, tree = s.token_to_kv_pool_allocator, s.req_to_token_pool, s.tree_cache
        ckpt = getattr(pool, "mamba_ckpt_pool", None)
        return {
            "kv_free": alloc.free_pages.tolist() + alloc.release_pages.tolist(),
            "mamba_free": self.mamba_free.free_slots.tolist(),
            "ckpt_free": ckpt.allocator.free_slots.tolist() if ckpt is not None else None,
            "rows_free": list(pool.free_slots),
            "tree": (tree.full_evictable_size(), tree.full_protected_size(), tree.mamba_evictable_size()),
        }
