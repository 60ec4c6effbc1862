"""``poolwatch incident``: list a sidecar's incidents, or export their bundles for an upstream report.

``poolwatch incident export`` writes one Markdown and one JSON file per incident into ``--out``
(``<id>.md``, ``<id>.json``): from a running sidecar's API (``--sidecar``, default
``http://127.0.0.1:9464``), or, with the sidecar down, from its incidents file (``--file``: the
``*.incidents.json`` beside its alert state file).  ``--id`` picks incidents (default: all).
``poolwatch incident list`` prints one line per incident, newest first: its id, when it was first
seen (UTC), its rank, engine and release, what was found and the line of engine code that did it.
Exit 0 done, 1 no such incident, 2 the sidecar or the file could not be read, or named something
that is not an incident.  What a bundle holds and leaves out: docs/security.md.

What a sidecar or a file says is not trusted (``--sidecar`` may name any server): an incident id
must be one the sidecar makes (``pw-`` and 16 hex digits) before it is asked for or written, so a
file name is never a path (``../../x``, ``/etc/x``: refused, nothing written); each file is written
inside ``--out`` only (a temporary file there, then renamed over ``<id>.md``: a link planted at
that name is replaced, never followed); every line printed is inert (:mod:`poolwatch.inert`: no
escape sequence or carriage return reaches the terminal) and the Markdown holds no heading or link
the bundle's strings made (:func:`~poolwatch.sidecar.incidents.export.bundle_markdown`).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from poolwatch.addresses import scrub_urls
from poolwatch.inert import inert
from poolwatch.sidecar.incidents.export import bundle_json, bundle_markdown
from poolwatch.sidecar.incidents.file import read_incidents
from poolwatch.sidecar.incidents.log import incident_summary
from poolwatch.sidecar.incidents.record import INCIDENT_ID

__all__ = [
    "DEFAULT_SIDECAR",
    "NotAnIncident",
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

# wanted ids ([]: all) -> their bodies, or why the sidecar's answer for one was refused
Bodies = Callable[[list[str]], "list[dict[str, Any] | NotAnIncident]"]


class NotAnIncident(ValueError):
    """A sidecar or a file named something that is not an incident (an id that is not one, a
    body that does not render)."""


def _ident(raw: object) -> str:
    """``raw`` when it is an incident id; else :class:`NotAnIncident` (shown inert and short)."""
    if isinstance(raw, str) and INCIDENT_ID.fullmatch(raw):
        return raw
    shown = inert(repr(raw))[:80]
    raise NotAnIncident(f"{shown} is not an incident id (pw- and 16 hex digits): nothing written for it")


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


def _say(text: str) -> None:
    print(f"poolwatch incident: {inert(text)}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    if args.action == "list":
        fetch = file_summaries(Path(args.file)) if args.file else sidecar_summaries(args.sidecar)
    else:
        fetch = file_bodies(Path(args.file)) if args.file else sidecar_bodies(args.sidecar)
    try:
        found = fetch(list(args.ids))
    except (httpx.HTTPError, OSError, ValueError) as exc:
        _say(scrub_urls(str(exc)) or type(exc).__name__)
        return 2
    refused = 0
    missing = sorted(set(args.ids) - {b.get("id") for b in found if isinstance(b, dict)})
    for ident in missing:
        _say(f"no incident {ident!r}")
    out = Path(args.out) if args.action == "export" else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    for body in found:
        try:
            if isinstance(body, NotAnIncident):
                raise body
            lines = [str(p) for p in write_bundle(out, body)] if out is not None else [list_line(body)]
        except (NotAnIncident, OSError) as exc:
            _say(str(exc))
            refused += 1
            continue
        for line in lines:
            print(inert(line))
    return 2 if refused else 1 if missing else 0


def write_bundle(out: Path, body: dict[str, Any]) -> list[Path]:
    """``<id>.json`` and ``<id>.md`` of one incident into ``out`` and nowhere else; returns their
    paths.  :class:`NotAnIncident` for an id that is not one or a body that does not render."""
    ident = _ident(body.get("id"))
    try:
        doc = json.dumps(bundle_json(body), indent=1, sort_keys=True) + "\n"
        page = bundle_markdown(body)
    except (KeyError, TypeError, IndexError, ValueError, AttributeError) as exc:
        why = type(exc).__name__
        raise NotAnIncident(f"{ident}: not an incident bundle ({why}): nothing written") from None
    folder = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return [out / _write_in(folder, f"{ident}.json", doc), out / _write_in(folder, f"{ident}.md", page)]
    finally:
        os.close(folder)


def _write_in(folder: int, name: str, text: str) -> str:
    """``text`` as the file ``name`` inside the directory ``folder`` (a temporary file beside it,
    renamed over it: whatever is at ``name``, a link included, is replaced, never followed)."""
    tmp = f".{name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        os.unlink(tmp, dir_fd=folder)
        raise
    return name


def list_line(s: dict[str, Any]) -> str:
    """One incident of ``GET /api/v1/incidents``: id, first seen (UTC), rank, engine and release,
    what was found, and where the engine's code did it (made inert by the caller);
    :class:`NotAnIncident` for a summary that is not one."""
    try:
        site = s["call_site"]
        top = site["frames"][0] if site and site["frames"] else None
        where = f"  {site['kind']}: {top['file']}:{top['line']} {top['function']}" if top else ""
        when = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(float(s["first_seen_at"])))
        what = f"{s['record']} {s['kind']} {s['pool']} x{s['count']}"
        return f"{_ident(s.get('id'))}  {when}  {s['rank']}  {s['engine']} {s['release']}  {what}{where}"
    except (KeyError, TypeError, IndexError, AttributeError, ValueError, OverflowError) as exc:
        raise NotAnIncident(f"not an incident ({type(exc).__name__})") from None


def sidecar_summaries(url: str, transport: httpx.BaseTransport | None = None) -> Bodies:
    """The incident list a running sidecar serves (``GET /api/v1/incidents``), newest first."""
    base = url.rstrip("/")

    def summaries(wanted: list[str]) -> list[dict[str, Any] | NotAnIncident]:
        with httpx.Client(timeout=TIMEOUT_S, transport=transport) as client:
            return [
                item
                if isinstance(item, dict)
                else NotAnIncident(f"{inert(repr(item))[:80]} is not an incident")
                for item in _listed(client, base)
                if not wanted or (isinstance(item, dict) and item.get("id") in wanted)
            ]

    return summaries


def file_summaries(path: Path) -> Bodies:
    """The incident list of a sidecar's incidents file, newest first, as its API lists it."""

    def summaries(wanted: list[str]) -> list[dict[str, Any] | NotAnIncident]:
        records = sorted(read_incidents(path), key=lambda r: r.body["first_seen_at"], reverse=True)
        return [incident_summary(r) for r in records if not wanted or r.id in wanted]

    return summaries


def sidecar_bodies(url: str, transport: httpx.BaseTransport | None = None) -> Bodies:
    """The bundles a running sidecar serves (``GET /api/v1/incidents`` and each one's)."""
    base = url.rstrip("/")

    def bodies(wanted: list[str]) -> list[dict[str, Any] | NotAnIncident]:
        with httpx.Client(timeout=TIMEOUT_S, transport=transport) as client:
            named = [item.get("id") if isinstance(item, dict) else item for item in _listed(client, base)]
            return [_fetched(client, base, raw) for raw in named if not wanted or raw in wanted]

    return bodies


def _listed(client: httpx.Client, base: str) -> list[Any]:
    """The items a sidecar lists (``GET /api/v1/incidents``); :class:`NotAnIncident` if not a list."""
    listed = client.get(f"{base}/api/v1/incidents")
    listed.raise_for_status()
    items = listed.json()
    if not isinstance(items, list):
        raise NotAnIncident("the sidecar's /api/v1/incidents is not a list")
    return items


def _fetched(client: httpx.Client, base: str, raw: object) -> dict[str, Any] | NotAnIncident:
    """One listed incident's bundle; a listed id that is not one is never asked for (it would be
    a path on the sidecar and, once written, on this machine), a body of another id refused."""
    try:
        ident = _ident(raw)
    except NotAnIncident as exc:
        return exc
    got = client.get(f"{base}/api/v1/incidents/{ident}")
    got.raise_for_status()
    body = got.json()  # the body and its figures: both render alike
    if not isinstance(body, dict) or body.get("id") != ident:
        return NotAnIncident(f"{ident}: the sidecar answered with another incident's bundle: nothing written")
    return body


def file_bodies(path: Path) -> Bodies:
    """The bundles in a sidecar's incidents file (read only; nothing on disk changes)."""

    def bodies(wanted: list[str]) -> list[dict[str, Any] | NotAnIncident]:
        records = sorted(read_incidents(path), key=lambda r: r.body["first_seen_at"], reverse=True)
        return [r.body for r in records if not wanted or r.id in wanted]

    return bodies
