"""SGLang's own ``/metrics`` (+ ``/get_server_info`` for sizes) as coarse snapshots, one per rank.

Never calls ``/get_load``: on 0.5.4.post1 with a hybrid model it crashes the scheduler.

SGLang refreshes its gauges only at batch events (a prefill batch, every ``decode_log_interval``
decode steps) and every 30 s while idle, so zero queues on one scrape prove nothing: the
gauges may still hold the values of a prefill batch computed before it ran.  A rank is called
*idle* only after its running and queue gauges have read 0 and its pool gauges have not moved
for ``idle_confirm`` seconds (longer than SGLang's 30 s idle refresh); only then is a non-zero
``used`` an imbalance.  ``used < 0`` is a surplus whatever the phase.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import httpx

from poolwatch.errors import PayloadError, Reason
from poolwatch.limits import DEFAULT_LIMITS, Limits
from poolwatch.model.rank import Phase, Pool, PoolAccount, Role, SourceKind, WorkerId
from poolwatch.model.snapshot import Snapshot
from poolwatch.naming import url_worker
from poolwatch.sources.base import BoundedSource, Target
from poolwatch.sources.http import get_bytes, join_url
from poolwatch.sources.logfile.heads import Ranks
from poolwatch.sources.metrics_page import parse_page
from poolwatch.sources.sglang.gauges import (
    RankGauges,
    ServerInfo,
    group_by_rank,
    parse_server_info,
    pool_accounts,
    queues,
    wanted,
)

__all__ = ["IdleWatch", "SOURCE", "SglangMetricsSource", "parse_metrics_page"]

SOURCE = SourceKind.of("sglang", "metrics")
IDLE_CONFIRM_SECONDS = 35.0
INFO_REFRESH_SECONDS = 300.0
MAX_RANKS = DEFAULT_LIMITS.max_page_ranks  # scheduler ranks one server's page may show (TP x PP x DP)


def parse_metrics_page(text: str, limits: Limits = DEFAULT_LIMITS) -> dict[Ranks, RankGauges]:
    """The SGLang gauges of a ``/metrics`` page by rank; raises ``PayloadError`` (parse, or
    too_large past ``limits.max_page_samples`` samples or ``limits.max_page_ranks`` ranks: one
    server's page never makes the sidecar hold unbounded series)."""
    return parse_page(text, wanted, group_by_rank, limits, "ranks")


@dataclass(slots=True)
class IdleWatch:
    """Decides, scrape after scrape, whether one rank is provably fully idle."""

    confirm: float = IDLE_CONFIRM_SECONDS
    _signature: tuple[object, ...] | None = None
    _since: float = 0.0

    def observe(self, queue_depths: dict[str, int], pools: dict[Pool, PoolAccount], now: float) -> Phase:
        if "running" not in queue_depths or "waiting" not in queue_depths:
            self._signature = None
            return Phase.UNKNOWN
        if any(queue_depths.values()):
            self._signature = None
            return Phase.BUSY
        signature = tuple(sorted((p.value, a.available, a.evictable, a.used) for p, a in pools.items()))
        if signature != self._signature:
            self._signature, self._since = signature, now
        return Phase.IDLE if now - self._since >= self.confirm else Phase.UNKNOWN


class SglangMetricsSource(BoundedSource):
    """Reads one SGLang server: every scheduler rank its ``/metrics`` shows."""

    def __init__(
        self,
        target: Target,
        clock: Callable[[], float],
        *,
        max_bytes: int = 4 << 20,
        idle_confirm: float = IDLE_CONFIRM_SECONDS,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        super().__init__(target, clock, max_bytes=max_bytes, limits=limits)
        self._idle_confirm = idle_confirm
        self._watches: dict[Ranks, IdleWatch] = {}
        self._info = ServerInfo()
        self._seq = 0

    async def scrape(self, client: httpx.AsyncClient) -> list[Snapshot]:
        body = await get_bytes(client, join_url(self._target.location, "/metrics"), self._max_bytes)
        ranks = parse_metrics_page(body.decode("utf-8", errors="replace"), self._limits)
        if not ranks:
            raise PayloadError(Reason.PARSE, "/metrics: no sglang: scheduler gauges (--enable-metrics off?)")
        info = await self.side_document(client, "/get_server_info", INFO_REFRESH_SECONDS)
        if info is not None:  # sizes change only on a restart; 0.5.12+ gauges carry them anyway
            self._info = parse_server_info(info)
        now = self._clock()
        self._seq += 1
        return [self._snapshot(r, g, now) for r, g in sorted(ranks.items())]

    def _snapshot(self, ranks: Ranks, gauges: RankGauges, now: float) -> Snapshot:
        pools = pool_accounts(gauges, self._info, ranks.dp)
        depths = queues(gauges)
        watch = self._watches.setdefault(ranks, IdleWatch(self._idle_confirm))
        return Snapshot(
            worker=self._worker(ranks, gauges),
            seq=self._seq,
            taken_at=now,
            phase=watch.observe(depths, pools, now),
            pools=pools,
            source=SOURCE,
            queues=depths,
        )

    def _worker(self, ranks: Ranks, gauges: RankGauges) -> WorkerId:
        t = self._target
        role = t.role if t.role is not Role.UNIFIED else (gauges.role or self._info.role or Role.UNIFIED)
        return WorkerId(
            worker=t.worker or url_worker(t.location),
            role=role,
            dp_rank=ranks.dp,
            tp_rank=ranks.tp,
            pp_rank=ranks.pp,
            model=gauges.model,
            release=self._info.version,
            instance=t.location,
            engine=SOURCE.engine,
        )
