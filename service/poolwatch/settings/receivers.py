"""How the notifiers reach their receivers, from the alerting settings: the secrets read from
their files (never from flags or the environment) and the CA bundle checked, at the edge.

:func:`receiver_access` turns the ``POOLWATCH_*`` paths into the plain values
:func:`poolwatch.notify.client.build_client` takes; a bad one is a
:class:`~poolwatch.errors.ConfigError` with one line naming its setting, raised when the sidecar is
built rather than at its first page.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from poolwatch.errors import ConfigError
from poolwatch.notify.client import tls_verify
from poolwatch.settings.groups import AlertSettings
from poolwatch.settings.parse import env_name

__all__ = ["ReceiverAccess", "receiver_access"]


@dataclass(frozen=True, slots=True)
class ReceiverAccess:
    """The notifiers' HTTP client's values (secrets kept out of ``repr``)."""

    token: str = field(default="", repr=False)
    basic_auth: tuple[str, str] | None = field(default=None, repr=False)  # (user, password)
    verify: bool = True
    ca_file: str = ""


def _read_secret(setting: str, path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"{env_name(setting)}: cannot read {path}: {exc.strerror}") from None


def receiver_access(settings: AlertSettings) -> ReceiverAccess:
    """The secrets of ``settings`` read and its CA bundle loaded once (so a bad one fails now)."""
    token_file = settings.bearer_token_file
    if token_file and settings.basic_auth_user:
        raise ConfigError(
            f"{env_name('bearer_token_file')}: set either a bearer token or basic auth, not both"
        )
    token = _read_secret("bearer_token_file", token_file) if token_file else ""
    basic_auth = None
    if settings.basic_auth_user:
        password = ""
        if settings.basic_auth_password_file:
            password = _read_secret("basic_auth_password_file", settings.basic_auth_password_file)
        basic_auth = (settings.basic_auth_user, password)
    try:
        tls_verify(settings.tls_verify, settings.ca_file)
    except ConfigError as exc:
        raise ConfigError(f"{env_name('ca_file')}: {exc}") from None
    return ReceiverAccess(token, basic_auth, settings.tls_verify, settings.ca_file)
