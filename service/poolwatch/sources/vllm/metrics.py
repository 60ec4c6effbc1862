"""vLLM's own ``/metrics`` (+ ``/version`` for the release) as coarse snapshots, one per engine.

One snapshot per EngineCore the page shows (its ``engine`` label, the data-parallel index, is the
rank: ``dp<engine>-tp0-pp0``, as the probe names it), with the block pool as :mod:`.gauges` reads
it and the ``running`` / ``waiting`` queues.  What the figures can prove, and what they cannot:

* **a surplus, when usage is below 0**: vLLM computes usage as ``1 - free / (num_gpu_blocks - 1)``,
  so a negative usage means its free queue counts more blocks than the pool has -- a block queued
  twice (a double free of a block shared by two requests on 0.10.2 - 0.23.0, where ``free_blocks``
  appends such a block twice).  Certain whatever the phase, by at least one block;
* **nothing else**.  A double free of a block held once (every release from 0.24.0) leaves it queued
  once at ``ref_cnt -1``, so the count is right until an allocation pops it and vLLM's own
  ``assert block.ref_cnt == 0`` kills EngineCore (the log source catches that).  A leak shows as a
  usage that stays above 0 while nothing runs, but so does a healthy engine whose KV connector
  still holds finished requests' blocks for a transfer, or a sink-attention model's reserved blocks
  (0.14.0 - 0.29.0): an idle vLLM proves nothing, so this source never calls an engine idle and
  never has a gap.  Which block, which request: only the probe can say.

vLLM refreshes the gauges from each engine step's statistics, so an engine that stopped stepping
keeps showing its last figures.  ``/version`` is read every few minutes, optionally (older servers
without it leave the release unknown).
"""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from poolwatch import releases
from poolwatch.errors import PayloadError, Reason
from poolwatch.limits import DEFAULT_LIMITS, Limits
from poolwatch.model.rank import SourceKind, WorkerId
from poolwatch.model.snapshot import Snapshot
from poolwatch.naming import url_worker
from poolwatch.sources.base import BoundedSource
from poolwatch.sources.http import get_bytes, join_url
from poolwatch.sources.metrics_page import parse_page
from poolwatch.sources.vllm.gauges import EngineGauges, group_by_engine, phase, pool_account, queues, wanted

__all__ = ["ENGINE", "SOURCE", "VllmMetricsSource", "parse_metrics_page"]

ENGINE = "vllm"
SOURCE = SourceKind.of(ENGINE, "metrics")
VERSION_REFRESH_SECONDS = 300.0


def parse_metrics_page(text: str, limits: Limits = DEFAULT_LIMITS) -> dict[int, EngineGauges]:
    """The vLLM gauges of a ``/metrics`` page by engine; raises ``PayloadError`` (parse, or
    too_large past ``limits.max_page_samples`` samples or ``limits.max_page_ranks`` engines)."""
    return parse_page(text, wanted, group_by_engine, limits, "engines")


def parse_version(doc: object) -> str:
    """The release ``/version`` answers (``{"version": "0.11.0"}``); "" when it says none, or
    says something that is not a release number (:func:`poolwatch.releases.shown`)."""
    return releases.shown(doc.get("version") if isinstance(doc, Mapping) else None)


class VllmMetricsSource(BoundedSource):
    """Reads one vLLM server: every EngineCore its ``/metrics`` shows."""

    # per instance once first set (immutable defaults: nothing is shared)
    _release = ""  # the server's release, from /version
    _seq = 0

    async def scrape(self, client: httpx.AsyncClient) -> list[Snapshot]:
        body = await get_bytes(client, join_url(self._target.location, "/metrics"), self._max_bytes)
        engines = parse_metrics_page(body.decode("utf-8", errors="replace"), self._limits)
        if not engines:
            raise PayloadError(
                Reason.PARSE, "/metrics: no vllm: gauges (a vLLM server with --disable-log-stats?)"
            )
        version = await self.side_document(client, "/version", VERSION_REFRESH_SECONDS)
        if version is not None:
            self._release = parse_version(version)
        now = self._clock()
        self._seq += 1
        return [self._snapshot(g, now) for _, g in sorted(engines.items())]

    def _snapshot(self, gauges: EngineGauges, now: float) -> Snapshot:
        account = pool_account(gauges)
        t = self._target
        worker = WorkerId(
            worker=t.worker or url_worker(t.location),
            role=t.role,
            dp_rank=gauges.engine,
            model=gauges.model,
            release=self._release,
            instance=t.location,
            engine=ENGINE,
        )
        return Snapshot(
            worker=worker,
            seq=self._seq,
            taken_at=now,
            phase=phase(gauges),
            pools={} if account is None else {account.pool: account},
            source=SOURCE,
            queues=queues(gauges),
        )
