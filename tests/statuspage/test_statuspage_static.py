"""The status page's files: served at ``/`` by the sidecar, self-contained (no external asset, no
build step), and asking only for API routes the sidecar has."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from fastapi import FastAPI
from tests.helpers import asgi_client

from poolwatch.settings.sidecar import Settings
from poolwatch.sidecar.alerts_api import alerts_router
from poolwatch.sidecar.app import STATIC_DIR, create_app
from poolwatch.sidecar.store import SnapshotStore
from rigs.fakes.clock import FakeClock

FILES = ("index.html", "statuspage.js", "statuspage.css")


def sidecar() -> FastAPI:
    return create_app(
        Settings(), store=SnapshotStore(), sources=[], clock=FakeClock(), routers=[alerts_router(list)]
    )


async def test_the_sidecar_serves_the_page_and_its_assets() -> None:
    async with asgi_client(sidecar()) as http:
        page = await http.get("/")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert "<title>poolwatch</title>" in page.text
        for name, kind in (("statuspage.js", "javascript"), ("statuspage.css", "text/css")):
            asset = await http.get(f"/{name}")
            assert asset.status_code == 200
            assert kind in asset.headers["content-type"]


def test_every_asset_the_page_references_is_shipped() -> None:
    html = (STATIC_DIR / "index.html").read_text(encoding="utf-8")
    referenced = set(re.findall(r'(?:src|href)="([^"#?]+)"', html))
    local = {r for r in referenced if not r.startswith(("api/", "metrics"))}
    assert local == {"statuspage.js", "statuspage.css"}
    assert all((STATIC_DIR / name).is_file() for name in local)


@pytest.mark.parametrize("name", FILES)
def test_the_page_loads_nothing_from_outside_the_sidecar(name: str) -> None:
    text = (STATIC_DIR / name).read_text(encoding="utf-8")
    assert not re.search(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/|@import|url\(", text), name


async def test_the_page_asks_only_for_routes_the_sidecar_serves() -> None:
    script = (STATIC_DIR / "statuspage.js").read_text(encoding="utf-8")
    asked = set(re.findall(r'getJson\("([^"]+)"\)', script))
    assert asked == {"api/v1/workers", "api/v1/targets", "api/v1/alerts", "api/v1/incidents"}
    async with asgi_client(sidecar()) as http:
        for path in asked:
            response = await http.get(f"/{path}")
            assert response.status_code == 200, path
            assert isinstance(response.json(), list), path


def test_the_script_is_valid_javascript() -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed; the browser tests still run the script")
    result = subprocess.run(
        [node, "--check", str(STATIC_DIR / "statuspage.js")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_the_static_directory_is_package_data() -> None:
    assert Path(__file__).parents[2] / "service" / "poolwatch" / "static" == STATIC_DIR
    pyproject = (Path(__file__).parents[2] / "pyproject.toml").read_text(encoding="utf-8")
    assert '"static/*"' in pyproject
