"""The notifiers' HTTP client: auth from secret files (read by the settings layer, which names its
``POOLWATCH_*`` settings in errors), TLS verification on by default; the client takes plain values."""

from __future__ import annotations

import base64
import ssl
from pathlib import Path

import httpx
import pytest

from poolwatch.errors import ConfigError
from poolwatch.notify.client import build_client, tls_verify
from poolwatch.settings.groups import AlertSettings
from poolwatch.settings.receivers import receiver_access


async def seen_headers(settings: AlertSettings) -> httpx.Headers:
    seen: list[httpx.Headers] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers)
        return httpx.Response(200)

    x = receiver_access(settings)
    client = build_client(token=x.token, basic_auth=x.basic_auth, transport=httpx.MockTransport(handler))
    async with client:
        await client.post("http://am.example/api/v2/alerts", json=[])
    return seen[0]


async def test_a_bearer_token_is_read_from_its_file(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    headers = await seen_headers(AlertSettings(bearer_token_file=str(token)))
    assert headers["authorization"] == "Bearer s3cret"
    assert headers["user-agent"] == "poolwatch"


async def test_basic_auth_takes_the_password_from_its_file(tmp_path: Path) -> None:
    password = tmp_path / "password"
    password.write_text("hunter2")
    headers = await seen_headers(
        AlertSettings(basic_auth_user="pager", basic_auth_password_file=str(password))
    )
    assert headers["authorization"] == "Basic " + base64.b64encode(b"pager:hunter2").decode()


async def test_no_auth_sends_no_authorization_header() -> None:
    assert "authorization" not in await seen_headers(AlertSettings())


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (AlertSettings(bearer_token_file="/nonexistent/token"), "POOLWATCH_BEARER_TOKEN_FILE: cannot read"),
        (AlertSettings(basic_auth_user="u", basic_auth_password_file="/nonexistent/pw"), "PASSWORD_FILE"),
        (AlertSettings(ca_file="/nonexistent/ca.pem"), "POOLWATCH_CA_FILE: cannot load"),
    ],
)
def test_an_unreadable_secret_or_ca_is_one_clear_config_error(settings: AlertSettings, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        receiver_access(settings)


def test_a_bearer_token_and_basic_auth_together_are_refused() -> None:
    both = AlertSettings(bearer_token_file="/nonexistent/token", basic_auth_user="u")
    with pytest.raises(ConfigError, match="POOLWATCH_BEARER_TOKEN_FILE: set either a bearer token or basic"):
        receiver_access(both)
    with pytest.raises(ValueError, match="not both"):
        build_client(token="t", basic_auth=("u", "p"))


def test_the_client_names_an_unloadable_ca_bundle_by_its_path_not_a_setting() -> None:
    with pytest.raises(ConfigError, match=r"^cannot load /nonexistent/ca\.pem: "):
        build_client(ca_file="/nonexistent/ca.pem")


def test_tls_is_verified_unless_turned_off() -> None:
    assert tls_verify() is True
    assert tls_verify(verify=False) is False
    assert tls_verify(verify=False, ca_file="/nonexistent/ca.pem") is False


def test_a_custom_ca_bundle_becomes_the_trust_store() -> None:
    bundle = ssl.get_default_verify_paths().cafile
    if bundle is None:
        pytest.skip("no system CA bundle to load")
    context = tls_verify(ca_file=bundle)
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode is ssl.CERT_REQUIRED
