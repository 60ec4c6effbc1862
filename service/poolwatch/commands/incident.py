"""``poolwatch incident``: list a sidecar's incidents, or export their bundles for an upstream report.

``poolwatch incident export`` writes one Markdown and one JSON file per incident into ``--out``
(``<id>.md``, ``<id>.json``): from a running sidecar's API (``--sidecar``, default
``http://127.0.0.1:9464``), or, with the sidecar down, from its incidents file (``--file``: the
``*.incidents.json`` beside its alert state file).  ``--id`` picks incidents (default: all).
``poolwatch incident list`` prints one line per incident, newest first: its id, when it was first
seen (UTC), its rank, engine and release, what was found and the line of engine code that did it.
Exit 0 done, 1 no such incident, 2 the sidecar or the file could not be read.  What a bundle
holds and leaves out: docs/security.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from poolwatch.addresses import scrub_urls
from poolwatch.sidecar.incidents.export import bundle_json, bundle_markdown
from poolwatch.sidecar.incidents.file import read_incidents
from poolwatch.sidecar.incidents.log import incident_summary

__all__ = [
    "DEFAULT_SIDECAR",
    "add_arguments",
    "file_bodies",
    "file_summaries",
    "list_line",
    "run",
    "sidecar_bodies",
    "sidecar_summaries",
    "write_bundle",
]

DEFAULT_SIDECAR = "http://127.0.0.1:9464"
TIMEOUT_S = 10.0

Bodies = Callable[[list[str]], list[dict[str, Any]]]  # wanted ids ([]: all) -> their bodies


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, text in (
        ("list", "List the incidents, newest first: one line each with its rank, time, pool and call site."),
        ("export", "Write each incident's bundle, <id>.md and <id>.json, to attach to an upstream issue."),
    ):
        cmd = sub.add_parser(name, help=text, description=text)
        where = cmd.add_mutually_exclusive_group()
        where.add_argument(
            "--sidecar", default=DEFAULT_SIDECAR, help=f"a sidecar's URL (default {DEFAULT_SIDECAR})"
        )
        where.add_argument(
            "--file", default="", help="a sidecar's incidents file (*.incidents.json), read offline"
        )
        cmd.add_argument(
            "--id", action="append", default=[], dest="ids", help="this incident only (repeatable)"
        )
        if name == "export":
            cmd.add_argument("--out", default=".", help="the directory to write <id>.md and <id>.json into")


def run(args: argparse.Namespace) -> int:
    if args.action == "list":
        fetch = file_summaries(Path(args.file)) if args.file else sidecar_summaries(args.sidecar)
    else:
        fetch = file_bodies(Path(args.file)) if args.file else sidecar_bodies(args.sidecar)
    try:
        found = fetch(list(args.ids))
    except (httpx.HTTPError, OSError, ValueError) as exc:
        print(f"poolwatch incident: {scrub_urls(str(exc)) or type(exc).__name__}", file=sys.stderr)
        return 2
    missing = sorted(set(args.ids) - {b["id"] for b in found})
    for ident in missing:
        print(f"poolwatch incident: no incident {ident!r}", file=sys.stderr)
    if args.action == "list":
        for summary in found:
            print(list_line(summary))
    else:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        for body in found:
            for path in write_bundle(out, body):
                print(path)
    return 1 if missing else 0


def write_bundle(out: Path, body: dict[str, Any]) -> list[Path]:
    """``<id>.json`` and ``<id>.md`` of one incident into ``out``; returns their paths."""
    ident = body["id"]
    done = [out / f"{ident}.json", out / f"{ident}.md"]
    done[0].write_text(json.dumps(bundle_json(body), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    done[1].write_text(bundle_markdown(body), encoding="utf-8")
    return done


def list_line(s: dict[str, Any]) -> str:
    """One incident of ``GET /api/v1/incidents``: id, first seen (UTC), rank, engine and release,
    what was found, and where the engine's code did it."""
    site = s["call_site"]
    top = site["frames"][0] if site and site["frames"] else None
    where = f"  {site['kind']}: {top['file']}:{top['line']} {top['function']}" if top else ""
    when = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(s["first_seen_at"]))
    what = f"{s['record']} {s['kind']} {s['pool']} x{s['count']}"
    return f"{s['id']}  {when}  {s['rank']}  {s['engine']} {s['release']}  {what}{where}"


def sidecar_summaries(url: str, transport: httpx.BaseTransport | None = None) -> Bodies:
    """The incident list a running sidecar serves (``GET /api/v1/incidents``), newest first."""
    base = url.rstrip("/")

    def summaries(wanted: list[str]) -> list[dict[str, Any]]:
        with httpx.Client(timeout=TIMEOUT_S, transport=transport) as client:
            listed = client.get(f"{base}/api/v1/incidents")
            listed.raise_for_status()
            return [item for item in listed.json() if not wanted or item["id"] in wanted]

    return summaries


def file_summaries(path: Path) -> Bodies:
    """The incident list of a sidecar's incidents file, newest first, as its API lists it."""

    def summaries(wanted: list[str]) -> list[dict[str, Any]]:
        records = sorted(read_incidents(path), key=lambda r: r.body["first_seen_at"], reverse=True)
        return [incident_summary(r) for r in records if not wanted or r.id in wanted]

    return summaries


def sidecar_bodies(url: str, transport: httpx.BaseTransport | None = None) -> Bodies:
    """The bundles a running sidecar serves (``GET /api/v1/incidents`` and each one's)."""
    base = url.rstrip("/")

    def bodies(wanted: list[str]) -> list[dict[str, Any]]:
        with httpx.Client(timeout=TIMEOUT_S, transport=transport) as client:
            listed = client.get(f"{base}/api/v1/incidents")
            listed.raise_for_status()
            ids = [item["id"] for item in listed.json() if not wanted or item["id"] in wanted]
            out = []
            for ident in ids:
                got = client.get(f"{base}/api/v1/incidents/{ident}")
                got.raise_for_status()
                out.append(got.json())  # the body and its figures: both render alike
            return out

    return bodies


def file_bodies(path: Path) -> Bodies:
    """The bundles in a sidecar's incidents file (read only; nothing on disk changes)."""

    def bodies(wanted: list[str]) -> list[dict[str, Any]]:
        records = sorted(read_incidents(path), key=lambda r: r.body["first_seen_at"], reverse=True)
        return [r.body for r in records if not wanted or r.id in wanted]

    return bodies
