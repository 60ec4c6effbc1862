"""How poolwatch names an address it was given: ``scheme://host:port``, never more.  Pure, stdlib.

A receiver's or a target's URL may carry a secret in any part after its host: a user and
password (``https://user:pass@am:9093``), a token in the path (a Slack-style webhook,
``/services/T000/B000/XXXX``), a key or a signature in the query (a probe's ``?sig=...&have=...``).
Every place a URL is *shown* -- a metric label, a log line, the status page, the API, an alert's
text, a CLI message -- shows :func:`shown_url` of it, and any text that may quote a URL (an HTTP
library's error) goes through :func:`scrub_urls` first.  :func:`distinct` keeps names unique when
two addresses show alike (two webhooks on one host: ``webhook:hooks.slack.com``,
``webhook:hooks.slack.com#2``), by the order they were configured in.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlsplit

__all__ = ["distinct", "scrub_urls", "shown_host", "shown_url"]

# a URL in running text: its last character is not the punctuation that follows it ("...:41234: HTTP")
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]{0,15}://[^\s\"'<>]*[^\s\"'<>:,;.)\]]")


def shown_url(url: str) -> str:
    """``scheme://host[:port]`` of ``url`` (no user, password, path, query or fragment); a value
    that is not an absolute URL with a host shows as ``<not a URL>`` (it could be anything)."""
    try:
        parts = urlsplit(url.strip())
        host, port = parts.hostname, parts.port
    except ValueError:  # a port that is not a number, an unbalanced bracket
        return "<not a URL>"
    if not parts.scheme or not host:
        return "<not a URL>"
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")


def shown_host(url: str) -> str:
    """``host[:port]`` of ``url``: how a receiver is named (``alertmanager:am.example:9093``)."""
    return shown_url(url).partition("://")[2] or shown_url(url)


def scrub_urls(text: str) -> str:
    """``text`` with every URL in it cut to :func:`shown_url` (an error message that quotes one)."""
    return _URL.sub(lambda m: shown_url(m[0]), text) if "://" in text else text


def distinct(names: Iterable[str]) -> list[str]:
    """``names`` with the second, third ... of a repeated name suffixed ``#2``, ``#3`` ..."""
    taken: set[str] = set()
    out = []
    for name in names:
        candidate, n = name, 1
        while candidate in taken:
            n += 1
            candidate = f"{name}#{n}"
        taken.add(candidate)
        out.append(candidate)
    return out
