"""The per-target caps come from the settings (``POOLWATCH_MAX_*``): lowered, each source refuses
what it would otherwise accept, with the same bounded reason as at the default."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from poolwatch.codec.snapshot import dump_snapshot
from poolwatch.discovery.directory import SkipReason, skip_reason
from poolwatch.discovery.entry import DiscoveryEntry, write_discovery
from poolwatch.errors import Reason, ScrapeError
from poolwatch.model.rank import SourceKind
from poolwatch.model.snapshot import Snapshot
from poolwatch.settings.sidecar import Settings
from poolwatch.sources.base import Target
from poolwatch.sources.targets import TargetSet, make_source

URL = "http://127.0.0.1:41234"


def settings(**env: str) -> Settings:
    return Settings.from_env(
        {"POOLWATCH_WORKER": "w", **{f"POOLWATCH_{k.upper()}": v for k, v in env.items()}}
    )


async def scrape_probe(snap: Snapshot, s: Settings) -> list[Snapshot]:
    source = make_source(Target("probe:p", SourceKind.PROBE, URL, "w"), replace_wait(s), lambda: 0.0)
    handler = httpx.MockTransport(lambda _: httpx.Response(200, json=dump_snapshot(snap)))
    async with httpx.AsyncClient(transport=handler) as client:
        return await source.scrape(client)


def replace_wait(s: Settings) -> Settings:
    """No long-poll in these tests: one plain GET per scrape."""
    return replace(s, scrape=replace(s.scrape, scrape_interval=0.001, scrape_timeout=0.001))


async def test_a_snapshot_over_the_configured_queue_cap_is_refused_as_schema(seed_snapshot: Snapshot) -> None:
    snap = replace(seed_snapshot, queues={f"q{i}": i for i in range(5)})
    assert len(await scrape_probe(snap, settings())) == 1
    with pytest.raises(ScrapeError, match="queues") as err:
        await scrape_probe(snap, settings(max_queues="4"))
    assert err.value.reason is Reason.SCHEMA


async def test_a_metrics_page_over_the_configured_rank_cap_is_refused_as_too_large() -> None:
    page = "".join(f'sglang:num_running_reqs{{dp_rank="{i}"}} 0\n' for i in range(3))
    source = make_source(
        Target("m", SourceKind("sglang-metrics"), URL, "w"), settings(max_page_ranks="2"), lambda: 0.0
    )

    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=page) if request.url.path == "/metrics" else httpx.Response(404)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as client:
        with pytest.raises(ScrapeError, match="3 ranks, more than 2") as err:
            await source.scrape(client)
    assert err.value.reason is Reason.TOO_LARGE


def test_a_discovery_file_over_the_configured_size_is_skipped_as_too_large(tmp_path: Path) -> None:
    write_discovery(tmp_path, DiscoveryEntry("http://127.0.0.1:4000", 7, "w", 0, 0, 0, "b", 1.5))
    (tmp_path / "padded.json").write_text(" " * 2000 + "{}")
    default = TargetSet(settings(probe_dir=str(tmp_path)), lambda: 0.0)
    small = TargetSet(settings(probe_dir=str(tmp_path), max_discovery_file_bytes="1024"), lambda: 0.0)
    assert len(default.current()) == len(small.current()) == 1  # the real one (~150 bytes) fits both
    assert skip_reason(default.skipped["padded.json"]) is SkipReason.SCHEMA
    assert skip_reason(small.skipped["padded.json"]) is SkipReason.TOO_LARGE
