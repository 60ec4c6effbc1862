"""The configured (static) targets: the flags and ``POOLWATCH_*`` variables, and the targets file.

The flags describe the pod's own engine: its probes (``--probe-urls``), its server
(``--metrics-urls``), its logs (``--log-paths``) and snapshot files, all carrying the pod's worker
name (:func:`static_targets`); ``--engine`` says whose ``/metrics`` and log formats those are
(SGLang's by default).  *Central mode* watches several servers: several
``--metrics-urls``, or a YAML file (``POOLWATCH_TARGETS_FILE``) whose targets name their worker (a
log must: its file name says nothing about who wrote it)::

    targets:
      - {name: prefill-0, source: sglang-metrics, url: http://prefill-0:30000, role: prefill}
      - {name: decode-0-log, source: sglang-log, path: /logs/decode-0.log, worker: decode-0}

A bad entry raises ``ConfigError`` naming it.  Discovered probes and the sources themselves are
:mod:`poolwatch.sources.targets`' concern.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from poolwatch.addresses import distinct, shown_url
from poolwatch.engines import UnknownEngine
from poolwatch.errors import ConfigError
from poolwatch.model.rank import Role, SourceKind
from poolwatch.naming import NoWorkerName, target_worker
from poolwatch.settings.sidecar import Settings
from poolwatch.sources.base import Target
from poolwatch.sources.engine import EngineSources, source_kinds, sources_of

__all__ = ["identity_labels", "load_targets_file", "parse_targets_document", "static_targets"]

_LOCATION_KEY = {"probe": "url", "metrics": "url", "log": "path", "file": "path"}  # by SourceKind.channel


def parse_targets_document(doc: Any, where: str) -> list[Target]:
    """The targets of a parsed YAML document; raises ``ConfigError`` naming the bad entry."""
    items = doc.get("targets") if isinstance(doc, Mapping) else None
    if not isinstance(items, list):
        raise ConfigError(f"{where}: expected a mapping with a 'targets' list")
    targets = [_target(item, f"{where}: targets[{i}]") for i, item in enumerate(items)]
    named = [t.name for t, explicit in targets if explicit]
    duplicate = next((n for n in named if named.count(n) > 1), None)
    if duplicate is not None:
        raise ConfigError(f"{where}: target name {duplicate!r} is used twice")
    places = [(t.source, t.location) for t, explicit in targets if not explicit]
    twice = next((p for p in places if places.count(p) > 1), None)
    if twice is not None:
        raise ConfigError(f"{where}: the {twice[0]} target {_name(*twice)!r} is listed twice")
    names = distinct(t.name for t, _ in targets)  # a name made from a URL may show like another
    return [replace(t, name=name) for (t, _), name in zip(targets, names, strict=True)]


def _target(item: Any, where: str) -> tuple[Target, bool]:
    """The entry's target, and whether it was given its name (else the name is made from it)."""
    if not isinstance(item, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {type(item).__name__}")
    given, kinds = item.get("source"), source_kinds()
    if given not in kinds:
        raise ConfigError(f"{where}.source: expected one of {', '.join(kinds)}, got {given!r}")
    kind = SourceKind(given)
    key = _LOCATION_KEY[kind.channel]
    location = _text(item, key, where, required=True)
    given_name = _text(item, "name", where)
    name = given_name or _name(kind, location)
    try:
        role = Role(_text(item, "role", where) or "unified")
    except ValueError:
        raise ConfigError(
            f"{where}.role: expected one of prefill, decode, unified, got {item['role']!r}"
        ) from None
    labels = item.get("labels", {})
    if not isinstance(labels, Mapping) or not all(isinstance(v, str) for v in labels.values()):
        raise ConfigError(f"{where}.labels: expected a mapping of strings")
    try:
        worker = target_worker(kind, location, given=_text(item, "worker", where))
    except NoWorkerName:
        raise ConfigError(f"{where}.worker: a {kind} target needs the worker it describes") from None
    target = Target(name, kind, location, worker, role, {str(k): v for k, v in labels.items()})
    return target, bool(given_name)


def _text(item: Mapping[str, Any], key: str, where: str, *, required: bool = False) -> str:
    value = item.get(key, "")
    if not isinstance(value, str) or (required and not value):
        raise ConfigError(f"{where}.{key}: expected a non-empty string, got {value!r}")
    return value


def load_targets_file(path: str) -> list[Target]:
    """Read and check a YAML targets file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
        doc = yaml.safe_load(text)
    except OSError as exc:
        raise ConfigError(f"POOLWATCH_TARGETS_FILE: cannot read {path}: {exc.strerror or exc}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"POOLWATCH_TARGETS_FILE: {path} is not valid YAML: {first}") from None
    return parse_targets_document(doc, path)


def identity_labels(settings: Settings) -> dict[str, str]:
    """The labels every target of this sidecar carries (its namespace, when one is set)."""
    ident = settings.identity
    return {"namespace": ident.namespace} if ident.namespace else {}


def static_targets(settings: Settings) -> list[Target]:
    """Targets named by flags/env and the targets file.

    The flags describe the pod's own engine (at most one ``--metrics-urls`` server): its probes,
    server and logs all carry the pod's worker name.  Several servers are central mode: each is
    named after its ``host:port``, probes after themselves, and a log cannot be told apart
    (``ConfigError``: list it in a targets file with its worker).  Snapshot files name themselves.
    """
    role, labels = settings.identity.role, identity_labels(settings)
    t = settings.targets
    own = settings.identity.worker if len(t.metrics_urls) <= 1 else ""
    engine = _engine(t.engine) if t.metrics_urls or t.log_paths else None
    metrics = _kind(engine, "metrics", "POOLWATCH_METRICS_URLS") if t.metrics_urls else None
    log = _kind(engine, "log", "POOLWATCH_LOG_PATHS") if t.log_paths else None
    listed = (
        [(SourceKind.PROBE, u) for u in t.probe_urls]
        + [(metrics, u) for u in t.metrics_urls if metrics is not None]
        + [(log, p) for p in t.log_paths if log is not None]
        + [(SourceKind.FILE, p) for p in t.snapshot_files]
    )
    names = distinct(_name(kind, loc) for kind, loc in listed)  # two URLs may show alike
    targets = [
        Target(name, kind, loc, _flag_worker(kind, loc, own), role, labels)
        for name, (kind, loc) in zip(names, listed, strict=True)
    ]
    if t.targets_file:
        targets += load_targets_file(t.targets_file)
    return targets


def _engine(name: str) -> EngineSources:
    try:
        return sources_of(name)
    except UnknownEngine as exc:
        raise ConfigError(f"POOLWATCH_ENGINE: {exc}") from None


def _kind(engine: EngineSources | None, channel: str, setting: str) -> SourceKind:
    """The engine's kind for ``channel`` ("metrics", "log"); a clear error when it reads none."""
    kind = None if engine is None else (engine.metrics if channel == "metrics" else engine.log)
    if kind is None:
        name = engine.engine if engine is not None else "?"
        raise ConfigError(f"{setting}: engine {name!r} has no {channel} source (POOLWATCH_ENGINE)")
    return kind


def _flag_worker(kind: SourceKind, location: str, own: str) -> str:
    try:
        return target_worker(kind, location, pod_worker="" if kind == SourceKind.FILE else own)
    except NoWorkerName:
        raise ConfigError(
            "POOLWATCH_LOG_PATHS: with several POOLWATCH_METRICS_URLS servers a log cannot be told "
            "apart; list each log with its worker in POOLWATCH_TARGETS_FILE"
        ) from None


def _name(kind: SourceKind, location: str) -> str:
    """A target's name: a file's name, else the URL as shown (no user, password, path or query;
    the log's path is the operator's own)."""
    if kind == SourceKind.FILE:
        return f"file:{Path(location).name}"
    return f"{kind}:{shown_url(location)}" if kind.channel in ("probe", "metrics") else f"{kind}:{location}"
