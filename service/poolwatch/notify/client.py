"""The HTTP client the notifiers share: optional bearer token or basic auth, TLS verified by
default (optionally against a custom CA bundle).  Secrets are read from files, never from flags."""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx

from poolwatch.errors import ConfigError
from poolwatch.settings.groups import AlertSettings

__all__ = ["auth_headers", "build_client", "tls_verify"]


def _read_secret(setting: str, path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"POOLWATCH_{setting.upper()}: cannot read {path}: {exc.strerror}") from None


def auth_headers(settings: AlertSettings) -> dict[str, str]:
    if settings.bearer_token_file and settings.basic_auth_user:
        raise ConfigError("POOLWATCH_BEARER_TOKEN_FILE: set either a bearer token or basic auth, not both")
    if settings.bearer_token_file:
        return {"Authorization": "Bearer " + _read_secret("bearer_token_file", settings.bearer_token_file)}
    return {}


def _basic_auth(settings: AlertSettings) -> httpx.BasicAuth | None:
    if not settings.basic_auth_user:
        return None
    password = ""
    if settings.basic_auth_password_file:
        password = _read_secret("basic_auth_password_file", settings.basic_auth_password_file)
    return httpx.BasicAuth(settings.basic_auth_user, password)


def tls_verify(settings: AlertSettings) -> ssl.SSLContext | bool:
    if not settings.tls_verify:
        return False
    if not settings.ca_file:
        return True
    try:
        return ssl.create_default_context(cafile=settings.ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"POOLWATCH_CA_FILE: cannot load {settings.ca_file}: {exc}") from None


def build_client(
    settings: AlertSettings, transport: httpx.AsyncBaseTransport | None = None, timeout: float = 10.0
) -> httpx.AsyncClient:
    """Raises :class:`ConfigError` (one line) for an unreadable secret or CA file."""
    return httpx.AsyncClient(
        transport=transport,
        timeout=timeout,
        verify=tls_verify(settings),
        auth=_basic_auth(settings),
        headers={"User-Agent": "poolwatch", **auth_headers(settings)},
    )
