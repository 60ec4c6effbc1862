"""A watch's URL is exactly what ``urlencode`` writes of its signature, wait and held tag.

The part before ``have`` is quoted once per signature (a busy probe's every answer brings a new
tag but the same signature), so the URL the probe sees must not change by that.
"""

from __future__ import annotations

import json
from dataclasses import replace
from urllib.parse import urlencode

import httpx

from poolwatch.codec.snapshot import dump_snapshot
from poolwatch.conservation import signature
from poolwatch.model.rank import SourceKind
from poolwatch.model.snapshot import Snapshot
from poolwatch.sources.base import Target
from poolwatch.sources.probe_source import ProbeSource

# (boot id, ETag header) of each answer: the signature changes with the boot id; tags that need quoting
ANSWERS = [("b0", '"0f1e"'), ("b0", '"2d3c"'), ("b 1|x", '"a b&c=d"'), ("b 1|x", 'W/"4b5a"'), ("b0", '"é+%"')]


async def test_each_watch_url_is_the_urlencoded_signature_wait_and_tag_of_the_last_answer(
    seed_snapshot: Snapshot,
) -> None:
    urls: list[str] = []

    def probe(request: httpx.Request) -> httpx.Response:
        urls.append(str(request.url))
        boot, etag = ANSWERS[len(urls) - 1]
        body = json.dumps(dump_snapshot(replace(seed_snapshot, boot_id=boot, seq=len(urls))))
        return httpx.Response(200, content=body, headers={"ETag": etag.encode()})

    for wait in (0.0, 0.5):
        urls.clear()
        target = Target(name="r", source=SourceKind.PROBE, location="http://127.0.0.1:9/v1/snapshot")
        source = ProbeSource(target, long_poll_s=wait)
        first = {"sig": "", "wait": f"{wait:g}"} if wait else {}
        expected = [f"{target.location}?{urlencode(first)}" if first else target.location]
        async with httpx.AsyncClient(transport=httpx.MockTransport(probe)) as client:
            for _, etag in ANSWERS:
                snap = (await source.scrape(client))[0]
                params = {"sig": signature(snap), "wait": f"{wait:g}"} if wait else {}
                params["have"] = etag.removeprefix("W/").strip('"')
                expected.append(f"{target.location}?{urlencode(params)}")
        assert [httpx.URL(u) for u in urls] == [httpx.URL(u) for u in expected[: len(urls)]]
        assert source.request_url == expected[-1]
