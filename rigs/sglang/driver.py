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
are counted (``steps``); a :class:`~rigs.timeline.Timeline` given to the driver sees every
snapshot the probe publishes at a loop boundary or after the chunk step, and SGLang's own check
raising in :meth:`Driver.strict_check`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from poolwatch.conservation import gap
from poolwatch.model.snapshot import Snapshot
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.probe import Probe
from poolwatch.probe.lifecycle import install, probe_of, uninstall
from poolwatch.probe.sglang.engine import SGLANG
from rigs.sglang.admission import Admission
from rigs.sglang.decode import Offload
from rigs.sglang.hicache import HiDecode
from rigs.sglang.rank import Rank, rank_class
from rigs.sglang.releases import Check, Release, release
from rigs.sglang.server_args import publish_server_args, published
from rigs.sglang.sessions import Sessions
from rigs.sglang.steps import Steps
from rigs.sglang.swa import Windowed
from rigs.timeline import Timeline

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


class Driver(Steps, Admission, Sessions, Offload, Windowed, HiDecode):
    """One release's scheduler on the rank :meth:`new` made (``sched``), the probe attached."""

    def __init__(
        self, version: str | Release, config: ProbeConfig = CONFIG, timeline: Timeline | None = None
    ) -> None:
        self.release = version if isinstance(version, Release) else release(version)
        self.config = config
        self.timeline = timeline
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
        server: dict[str, Any] | None = None,
        **sizes: Any,
    ) -> Rank:
        """A fresh rank (``mode``: ``null``, ``prefill`` or ``decode``) born with a probe of
        ``config`` (the driver's, guard on or off), the release told; ``checkpoints``: with SGLang's
        int8 Mamba checkpoint pool (0.5.23); ``server``: server options set on the published args."""
        kept = publish_server_args(self.release, **(server or {}))
        cls = rank_class(self.release)
        uninstall(cls)
        install(SGLANG, cls, replace(config or self.config, guard=guard, release=self.release.version))
        self.sched = cls(mode, **sizes)
        if kept:  # SGLang's scheduler keeps its own (the census reads a decode step's reach there)
            self.sched.server_args = published()
        if checkpoints:
            self.sched.add_checkpoint_pool()
        self.samples, self.steps = [], 0
        return self.sched  # type: ignore[no-any-return]

    @property
    def probe(self) -> Probe:
        probe = probe_of(self.sched)
        assert probe is not None, "the rank has no probe"
        return probe

    def engine_clock(self) -> None:
        """The probe's wall time is the engine's: the timeline's time of the step its loop hook
        closes, so what it ages -- a hold, a stall -- ages in engine steps, as the timeline's
        detector judges them (the driver's timeline; every step a sample, as :data:`CONFIG`)."""
        timeline = self.timeline
        assert timeline is not None, "the engine's clock is its timeline's"
        probe = self.probe
        probe.wall = lambda: timeline.at(self.steps + 1)
        probe.started_at = timeline.at(self.steps)

    def loop(self) -> None:
        """One turn of the event loop: the release's loop hook (the probe looks before it, at the
        rates of its config)."""
        getattr(self.sched, self.release.loop_hook)()
        self.steps += 1
        self._seen()

    def _seen(self) -> None:
        if self.timeline is not None:
            self.timeline.look(self.steps, self.probe.latest)

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

    def chunk_step(self) -> None:
        """SGLang's own ``process_prefill_chunk`` on a PD prefill rank (the KV send deferred, as
        with the overlap scheduler: there is no transfer engine)."""
        self.sched.enable_overlap = True
        try:
            self.sched.process_prefill_chunk()
        finally:
            self.sched.enable_overlap = False
        self._seen()  # the probe looks right after it (a finding publishes at once)

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
        try:
            if self.release.check is Check.MAMBA:
                self.sched.check_memory()
                return
            message = self.idle_leak()
            if message:
                raise ValueError("token_to_kv_pool_allocator memory leak detected! " + message)
        except ValueError as exc:
            if self.timeline is not None:
                self.timeline.engine_said(self.steps, str(exc).strip().splitlines()[0][:200])
            raise

    def state(self) -> dict[str, Any]:
        """What a later allocation would be handed (the free lists, in order), and the tree's
        counters: two runs in this state behave the same from here."""
        s = self.sched
        alloc, pool, tree = s.token_to_kv_pool_allocator, s.req_to_token_pool, s.tree_cache
        ckpt = getattr(pool, "mamba_ckpt_pool", None)
        hybrid = s.cache_params is not None  # (a dense rank has no Mamba pool)
        return {
            "kv_free": alloc.free_pages.tolist() + alloc.release_pages.tolist(),
            "mamba_free": self.mamba_free.free_slots.tolist() if hybrid else None,
            "ckpt_free": ckpt.allocator.free_slots.tolist() if ckpt is not None else None,
            "rows_free": list(pool.free_slots),
            "tree": (
                (tree.full_evictable_size(), tree.full_protected_size(), tree.mamba_evictable_size())
                if hybrid
                else (tree.evictable_size(), tree.protected_size(), 0)
            ),
        }
