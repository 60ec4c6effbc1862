"""Targets are named, and their failures told, without a URL's user, password, path or query.

Before: a ``PoolwatchTargetDown`` text (the status page, the page itself) carried the whole signed
snapshot URL (``?sig=...&wait=...&have=<digest>``), and a static ``--metrics-urls`` target was
named with its password.  Now a person reads the rank and the error; the secret is nowhere.
"""

from __future__ import annotations

import httpx
import pytest

from poolwatch.addresses import distinct, scrub_urls, shown_host, shown_url
from poolwatch.codec.snapshot import dump_snapshot
from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.detector import Detector
from poolwatch.detect.families.targets import TARGET_DOWN
from poolwatch.model.snapshot import Snapshot
from poolwatch.settings.groups import ScrapeSettings, TargetSettings
from poolwatch.settings.sidecar import Settings
from poolwatch.sidecar.scraper import Scraper
from poolwatch.sidecar.store import SnapshotStore
from poolwatch.sources.base import Target
from poolwatch.sources.probe_source import ProbeSource
from poolwatch.sources.target_config import static_targets
from rigs.fakes.clock import FakeClock


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://oncall:hunter2@am.example:9093/x?token=t", "https://am.example:9093"),
        ("https://hooks.slack.com/services/T0/B0/XXXX", "https://hooks.slack.com"),
        ("http://127.0.0.1:41234/v1/snapshot?sig=a&wait=1&have=abc", "http://127.0.0.1:41234"),
        ("http://[::1]:80/x#frag", "http://[::1]:80"),
        ("secret-without-a-scheme", "<not a URL>"),
        ("http://h:notaport/", "<not a URL>"),
    ],
)
def test_a_url_shows_its_scheme_host_and_port_only(url: str, shown: str) -> None:
    assert shown_url(url) == shown
    assert shown_host(url) == shown.partition("://")[2] or shown


def test_urls_quoted_in_a_message_are_cut_and_repeated_names_kept_apart() -> None:
    quoted = "Redirect for url 'https://u:p@h.example/secret?k=1': HTTP 302 (see http://x:1/a?b)"
    assert scrub_urls(quoted) == "Redirect for url 'https://h.example': HTTP 302 (see http://x:1)"
    assert distinct(["a", "a", "b", "a"]) == ["a", "a#2", "b", "a#3"]


def test_a_static_target_is_named_without_its_password_path_or_query() -> None:
    urls = ("http://scraper:pw@prefill-0:30000/metrics?key=k", "http://scraper:pw@prefill-0:30000/other")
    settings = Settings(
        targets=TargetSettings(metrics_urls=urls, probe_urls=("http://u:p@127.0.0.1:41234/?s=1",))
    )
    names = [t.name for t in static_targets(settings)]
    assert names == [
        "probe:http://127.0.0.1:41234",
        "sglang-metrics:http://prefill-0:30000",
        "sglang-metrics:http://prefill-0:30000#2",
    ]


async def test_a_probe_target_down_says_the_rank_and_the_error_not_the_signed_url(
    clock: FakeClock, seed_snapshot: Snapshot
) -> None:
    answers = iter([httpx.Response(200, json=dump_snapshot(seed_snapshot), headers={"ETag": '"d1g3st"'})])

    def probe(request: httpx.Request) -> httpx.Response:
        return next(answers, httpx.Response(500, text=f"refused {request.url}"))

    target = Target("probe:prefill-0/dp0-tp1-pp0", "probe", "http://127.0.0.1:41234", "prefill-0")
    source = ProbeSource(target, long_poll_s=0.5, secret="ab" * 32)
    store = SnapshotStore()
    scraper = Scraper(store, [source], ScrapeSettings(scrape_interval=1.0, scrape_timeout=1.0), clock)
    async with httpx.AsyncClient(transport=httpx.MockTransport(probe)) as client:
        assert await scraper.scrape_once(source, client)
        assert "have=d1g3st" in source.request_url  # the next request carries the content tag
        assert not await scraper.scrape_once(source, client)
    (state,) = store.targets()
    assert state.last_error == "GET http://127.0.0.1:41234: HTTP 500"
    detector = Detector(DetectorConfig(target_down_for=0.0), clock)
    alerts = detector.evaluate(clock.now, latest=store.latest(), targets=store.targets())
    (down,) = [a for a in alerts if a.name == TARGET_DOWN]
    text = down.annotations["description"]
    assert "probe:prefill-0/dp0-tp1-pp0" in text
    assert "HTTP 500" in text
    for secret in ("sig=", "have=", "d1g3st", "wait=", "/v1/snapshot"):
        assert secret not in text
