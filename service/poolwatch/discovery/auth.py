"""Proof of the node's secret without sending it: the sidecar's request signature (stdlib only).

The sidecar finds probes through files any process able to write the discovery directory could
have written, so it must never send the secret itself to a discovered URL.  Instead each request
it wants treated as the sidecar's (a reserved long-poll slot or connection; a mutating route)
carries::

    Authorization: Poolwatch-HMAC ts=<unix time> nonce=<32 hex> mac=<64 hex>

with ``mac = HMAC-SHA256(secret, "poolwatch-request-v1\\n" method "\\n" authority "\\n" path
"\\n" ts "\\n" nonce)`` (:func:`sign_request`).  The probe checks it against *its own* bound
address (``127.0.0.1:<port>``), its route, a clock within :data:`MAX_SKEW_S` and a nonce it has not
seen (:class:`Verifier`).  So a listener that a forged discovery file points the sidecar at learns
a signature for its own address, for one path and one use: never the secret, and nothing the real
probe would accept.  A client that read the secret file itself (an operator with ``curl``) may
still show it as ``Authorization: Bearer <secret>``: it is sent where that client chose.

Cost on the probe: one HMAC over ~100 bytes and a dictionary lookup per signed request, in the
endpoint's I/O thread; the scheduler thread never sees it.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
import secrets
import threading
from collections import OrderedDict

__all__ = ["MAX_SKEW_S", "SCHEME", "Verifier", "mac_of", "sign_request"]

SCHEME = "Poolwatch-HMAC"
MAX_SKEW_S = 30.0  # a signature older (or newer) than this is refused: the nonces kept cover it
MAX_NONCES = 4096  # nonces remembered; a flood of valid ones needs the secret
_HEADER = re.compile(rf"{SCHEME} ts=(\d{{1,12}}(?:\.\d{{1,6}})?) nonce=([0-9a-f]{{32}}) mac=([0-9a-f]{{64}})")
_CONTEXT = "poolwatch-request-v1"


def mac_of(secret: str, *parts: str) -> str:
    """HMAC-SHA256 of ``parts`` (joined by newlines, under a fixed context) keyed by ``secret``."""
    message = "\n".join((_CONTEXT, *parts)).encode("utf-8", "surrogatepass")
    return hmac.new(secret.encode("ascii"), message, hashlib.sha256).hexdigest()


def sign_request(secret: str, method: str, authority: str, path: str, now: float, nonce: str = "") -> str:
    """The ``Authorization`` value for one request to ``authority`` (``host:port``) and ``path``."""
    nonce = nonce or secrets.token_hex(16)
    ts = f"{now:.3f}"
    return f"{SCHEME} ts={ts} nonce={nonce} mac={mac_of(secret, method, authority, path, ts, nonce)}"


class Verifier:
    """Checks :func:`sign_request` signatures for one probe endpoint (thread-safe, bounded)."""

    def __init__(self, secret: str, authority: str) -> None:
        self._secret, self._authority = secret, authority
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def verify(self, header: str, method: str, path: str, now: float) -> bool:
        """Whether ``header`` signs this request, freshly, with a nonce not seen before."""
        found = _HEADER.fullmatch(header.strip()) if len(header) < 256 else None
        if found is None:
            return False
        ts, nonce, mac = found.groups()
        if not math.isfinite(float(ts)) or abs(float(ts) - now) > MAX_SKEW_S:
            return False
        want = mac_of(self._secret, method, self._authority, path, ts, nonce)
        if not hmac.compare_digest(want, mac):
            return False
        return self._first_use(nonce, now)

    def _first_use(self, nonce: str, now: float) -> bool:
        with self._lock:
            while self._seen and (
                len(self._seen) >= MAX_NONCES or next(iter(self._seen.values())) < now - 2 * MAX_SKEW_S
            ):
                self._seen.popitem(last=False)
            if nonce in self._seen:
                return False
            self._seen[nonce] = now
            return True
