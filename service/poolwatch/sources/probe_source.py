"""The in-process probe's snapshot: ``GET <url>/v1/snapshot`` ->
:func:`poolwatch.codec.snapshot.parse_snapshot`.

The probe reads every term of the conservation equation at one scheduler loop boundary, so its
pool accounts are exact (protected, held, tripwires).  The payload names its rank; the target
adds what the sidecar knows better (the worker name and role from the pod's environment).
"""

from __future__ import annotations

import asyncio
import time
from urllib.parse import quote_plus, urlencode, urlsplit

import httpx

from poolwatch.addresses import shown_url
from poolwatch.codec.footprint import weight
from poolwatch.codec.renewal import CLOCK_HEADER, HAVE, NOT_MODIFIED, renew
from poolwatch.codec.schema import SnapshotFormatError
from poolwatch.codec.snapshot import parse_snapshot
from poolwatch.conservation import signature
from poolwatch.discovery.auth import sign_request
from poolwatch.discovery.final import final_stat
from poolwatch.errors import PayloadError, Reason, ScrapeError
from poolwatch.limits import DEFAULT_LIMITS, Limits
from poolwatch.model.snapshot import Snapshot
from poolwatch.sources.base import Source, Target, with_target_identity
from poolwatch.sources.failures import scrape_failure
from poolwatch.sources.final import RankExited, load_final
from poolwatch.sources.http import decode_json, get_answer, join_url
from poolwatch.sources.wire import Answer, Headers

__all__ = ["SNAPSHOT_PATH", "ProbeSource", "parse_probe_payload", "watch_wait"]

SNAPSHOT_PATH = "/v1/snapshot"
WATCH_MARGIN = 0.15  # seconds of each interval left for an answer's trip and the loop's pause
FULL_BACKOFF_S = (0.05, 0.5)  # the first pause before asking a full probe again, and the longest
FULL_RETRY_S = 1.5  # at most this long in pauses, then the failure is the scrape's
HOLD_BYTES = 64 << 10  # the heaviest snapshot held for renewal (codec.footprint.weight; usual: ~6 KB)


def watch_wait(interval: float, timeout: float) -> float:
    """How long a watch asks the probe to hold an unchanged answer: a little less than the scrape
    interval (so with the trip and the pause between requests every rank is refreshed within each
    interval), and at most half the scrape timeout."""
    return min(interval - min(WATCH_MARGIN, interval / 4), timeout / 2)


def parse_probe_payload(doc: object, target: Target, limits: Limits = DEFAULT_LIMITS) -> Snapshot:
    """A decoded probe payload as a snapshot of ``target``; raises ``PayloadError``."""
    try:
        snap = parse_snapshot(doc, limits)
    except SnapshotFormatError as exc:
        raise scrape_failure(exc, target.location) from None
    return with_target_identity(snap, target)


class ProbeSource(Source):
    """Reads one probe endpoint (one scheduler rank).

    With ``long_poll_s > 0`` it *watches*: each request tells the probe the signature of the
    last snapshot seen and waits up to ``long_poll_s`` for a different one, so a new imbalance or
    tripwire arrives within one probe sample instead of one scrape interval (``long_poll`` tells
    the scrape loop not to sleep between such requests).

    It sends back the content tag (``ETag``) of the snapshot it holds; a probe whose latest
    snapshot has the same content answers with its clock alone (a bodiless 304), and the held
    snapshot is renewed with it instead of decoding a body (:mod:`poolwatch.codec.renewal`).  A probe
    that sends no ETag (an older one) is read in full every time, as before.

    A probe found in the discovery directory is sent a proof of the node's ``secret`` from there
    (a fresh signature of each request, :mod:`poolwatch.discovery.auth`; never the secret itself,
    which a forged discovery file would otherwise steal), so it keeps a long-poll slot for the
    sidecar however many local clients hold its public ones (:mod:`poolwatch.probe.endpoint.server`),
    and a connection place however many they hold: a probe whose places are all taken makes room
    for a request that shows the secret.  Should it still answer 503 (too many connections), the
    plain GET is asked again after :data:`FULL_BACKOFF_S` (doubling, bounded, at most
    :data:`FULL_RETRY_S` in all), never after the scrape loop's back-off of up to 30 s."""

    def __init__(
        self,
        target: Target,
        max_bytes: int = 4 << 20,
        long_poll_s: float = 0.0,
        final_path: str = "",
        limits: Limits = DEFAULT_LIMITS,
        secret: str = "",
    ) -> None:
        self._target = target
        self._limits = limits
        self._secret = secret
        self._final_path = final_path  # where this rank's probe leaves its final snapshot
        self._final_sent = ""
        self._final_mark: tuple[int, int] = (0, 0)  # the final file last seen by last_word_pending
        self._failing = False  # the last request failed (the rank may be gone)
        self._boot = ""  # the boot id of the last live answer
        self._max_bytes = max_bytes
        self._long_poll_s = long_poll_s
        self._seen = ""
        self._held: tuple[str, Snapshot] | None = None  # (content tag, snapshot) of the last answer
        self._request: tuple[str, str, str] = ("", "", "")  # (seen, have, URL): built once per change
        self._watch: tuple[str, str] = ("", "")  # (seen, URL before ``have``): quoted once per signature

    @property
    def target(self) -> Target:
        return self._target

    @property
    def long_poll(self) -> bool:
        return self._long_poll_s > 0

    async def scrape(self, client: httpx.AsyncClient) -> list[Snapshot]:
        """The probe's snapshot; when it stops answering, its final snapshot if it left one
        (:class:`~poolwatch.sources.final.RankExited`: the target is down, the last word delivered).
        After a failure the final file is looked at first: a rank that hangs rather than refuses
        would otherwise hold its last word for a whole request timeout."""
        if self._failing and (final := self._final()) is not None:
            raise RankExited(Reason.CONNECT, f"{shown_url(self.url)}: the rank stopped answering", [final])
        try:
            answer = await self._fetch(client)
        except ScrapeError as exc:
            self._failing = True
            final = self._final()
            if final is None:
                raise
            raise RankExited(exc.reason, f"{exc}; the rank left its final snapshot", [final]) from None
        self._failing = False
        snap = self._renewed(answer) if answer[0] == NOT_MODIFIED else self._decoded(answer)
        self._seen, self._boot = signature(snap), snap.boot_id
        return [snap]

    def last_word_pending(self) -> bool:
        """Failing, and a final snapshot of the boot it last answered for may be there: one
        ``stat`` (the scrape loop asks every :data:`~poolwatch.sidecar.scraper.FINAL_POLL_S` while
        it backs off; the file is read and its signature checked only by :meth:`scrape`)."""
        if not (self._failing and self._final_path and self._boot) or self._final_sent == self._boot:
            return False
        info = final_stat(self._final_path)  # relative to the directory this sidecar opened
        if info is None:
            return False
        mark = (info.st_ino, info.st_mtime_ns)
        new, self._final_mark = mark != self._final_mark, mark
        return new

    def _decoded(self, answer: Answer) -> Snapshot:
        snap = parse_probe_payload(decode_json(answer[2], self.url), self._target, self._limits)
        tag = answer[1].get("etag", "").removeprefix("W/").strip('"')
        # kept to renew with a bodiless 304: only a snapshot of the usual weight (a heavy one is
        # the store's to hold, within its byte budget; the next answer is then a whole body)
        self._held = (tag, snap) if tag and weight(snap) <= HOLD_BYTES else None
        return snap

    def _renewed(self, answer: Answer) -> Snapshot:
        """The held snapshot at the probe's new clock (the probe said its content is the same)."""
        held, self._held = self._held, None
        if held is None:
            raise PayloadError(
                Reason.SCHEMA, f"{shown_url(self.url)}: HTTP 304 for a snapshot this sidecar does not hold"
            )
        try:
            snap = renew(held[1], answer[1].get(CLOCK_HEADER.lower(), ""))
        except ValueError as exc:
            raise PayloadError(Reason.SCHEMA, f"{shown_url(self.url)}: {exc}") from None
        self._held = (held[0], snap)
        return snap

    async def _fetch(self, client: httpx.AsyncClient) -> Answer:
        """The long-poll's answer; when the probe refuses it (503: its few long-poll slots are
        taken, by a hostile local client say), the latest snapshot by a plain GET, then a pause of
        one wait, so the rank stays watched at the scrape interval and the loop does not spin."""
        expect = frozenset({NOT_MODIFIED}) if self._held is not None else frozenset()
        if not self.long_poll:
            return await self._get(client, self._request_url(), expect)
        try:
            return await get_answer(client, self._request_url(), self._max_bytes, expect, self._signed())
        except ScrapeError as exc:
            if not _refused(exc):
                raise
        answer = await self._get(client, self.url, frozenset())
        await asyncio.sleep(self._long_poll_s)
        return answer

    async def _get(self, client: httpx.AsyncClient, url: str, expect: frozenset[int]) -> Answer:
        """One GET, asked again with a bounded back-off while the probe answers 503 (its
        connection places, or its handler threads, all taken)."""
        pause, paused = FULL_BACKOFF_S[0], 0.0
        while True:
            try:
                return await get_answer(client, url, self._max_bytes, expect, self._signed())
            except ScrapeError as exc:
                if not _refused(exc) or paused + pause > FULL_RETRY_S:
                    raise
            await asyncio.sleep(pause)
            paused, pause = paused + pause, min(pause * 2, FULL_BACKOFF_S[1])

    def _signed(self) -> Headers:
        """A fresh signature of this request (none without a secret): one use, this URL's address."""
        if not self._secret:
            return ()
        parts = urlsplit(self.url)
        return (("Authorization", sign_request(self._secret, "GET", parts.netloc, parts.path, time.time())),)

    def _request_url(self) -> str:
        """The next request's URL, built only when the signature or the held content changed."""
        have = self._held[0] if self._held is not None else ""
        if not self._request[2] or self._request[:2] != (self._seen, have):
            self._request = (self._seen, have, self.request_url)
        return self._request[2]

    def _final(self) -> Snapshot | None:
        """The gone rank's final snapshot, once (see :mod:`poolwatch.sources.final`)."""
        if not (self._final_path and self._boot):
            return None
        # no age limit: the boot is the one this process just saw answer live
        snap = load_final(self._final_path, self._secret, time.time(), self._boot, float("inf"))
        if snap is None or snap.boot_id == self._final_sent:
            return None  # none, forged, an earlier life's, or already delivered
        self._final_sent = snap.boot_id
        return with_target_identity(snap, self._target)

    @property
    def request_url(self) -> str:
        """The URL with ``sig`` and ``wait`` (a watch) and ``have`` (a held snapshot), as ``urlencode``
        writes them; the part before ``have`` is quoted once per signature, since a busy probe's
        every answer brings a new tag but the same signature."""
        if not self._watch[1] or self._watch[0] != self._seen:
            params = {"sig": self._seen, "wait": f"{self._long_poll_s:g}"} if self.long_poll else {}
            self._watch = (self._seen, f"{self.url}?{urlencode(params)}" if params else self.url)
        base = self._watch[1]
        if self._held is None:
            return base
        tag = self._held[0]
        tag = tag if tag.isascii() and tag.isalnum() else quote_plus(tag)  # a digest needs no quoting
        return f"{base}{'&' if self.long_poll else '?'}{HAVE}={tag}"

    @property
    def url(self) -> str:
        loc = self._target.location
        return loc if loc.rstrip("/").endswith(SNAPSHOT_PATH) else join_url(loc, SNAPSHOT_PATH)


def _refused(exc: ScrapeError) -> bool:
    """A 503: the probe has no place, thread or long-poll slot for the request now (it says retry)."""
    return exc.reason is Reason.HTTP_STATUS and "HTTP 503" in str(exc)
