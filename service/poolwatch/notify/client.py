"""The HTTP client the notifiers share: optional bearer token or basic auth, TLS verified by
default (optionally against a custom CA bundle).

It takes plain values: the secrets themselves (the sidecar reads them from files and names its
settings in errors, :mod:`poolwatch.settings.secrets`), the CA bundle's path and the verify flag."""

from __future__ import annotations

import ssl

import httpx

from poolwatch.errors import ConfigError

__all__ = ["build_client", "tls_verify"]


def tls_verify(verify: bool = True, ca_file: str = "") -> ssl.SSLContext | bool:
    """What httpx verifies the receivers with: nothing (``verify`` off), the system's trust store,
    or ``ca_file``'s.  A bundle that cannot be loaded is a :class:`ConfigError` naming the file."""
    if not verify:
        return False
    if not ca_file:
        return True
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load {ca_file}: {exc}") from None


def build_client(
    *,
    token: str = "",
    basic_auth: tuple[str, str] | None = None,
    verify: bool = True,
    ca_file: str = "",
    transport: httpx.AsyncBaseTransport | None = None,
    timeout: float = 10.0,
) -> httpx.AsyncClient:
    """A client sending ``token`` as a bearer token or ``basic_auth`` (user, password) -- not
    both -- and verifying TLS as :func:`tls_verify` says.  Raises :class:`ConfigError` (one line)
    for a CA bundle that cannot be loaded."""
    if token and basic_auth is not None:
        raise ValueError("give a bearer token or basic auth, not both")
    headers = {"User-Agent": "poolwatch"}
    if token:
        headers["Authorization"] = "Bearer " + token
    return httpx.AsyncClient(
        transport=transport,
        timeout=timeout,
        verify=tls_verify(verify, ca_file),
        auth=httpx.BasicAuth(*basic_auth) if basic_auth is not None else None,
        headers=headers,
    )
