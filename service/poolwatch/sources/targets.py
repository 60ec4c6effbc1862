"""Where the sidecar reads from: discovered probe endpoints, or a static list of targets.

*Sidecar mode* needs no per-rank configuration: each probe (one per scheduler rank of the pod)
writes ``<worker>-dp<D>-tp<T>-pp<P>.json`` = ``{"url", "pid", "worker", "ranks", "boot_id",
"started_at"}`` into the discovery directory, which is re-read every scrape cycle (ranks come
and go; a restarted rank has a new ``boot_id``).  With ``--probe-workers`` a sidecar follows only
the probes of those workers (several pods sharing one host directory).  The pod's SGLang
``/metrics`` (``--metrics-urls``) and log (``--log-paths``) describe the same ranks; every worker
name comes from :mod:`poolwatch.identity`, so all three merge into one rank per scheduler.  The
role (``POOLWATCH_ROLE``, when not ``unified``) comes from the sidecar's own environment through
:class:`~poolwatch.settings.Settings`.

*Central mode* watches several servers: several ``--metrics-urls``, or a YAML file whose targets
name their worker (a log must: its file name says nothing about who wrote it)::

    targets:
      - {name: prefill-0, source: sglang-metrics, url: http://prefill-0:30000, role: prefill}
      - {name: decode-0-log, source: sglang-log, path: /logs/decode-0.log, worker: decode-0}
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from poolwatch.discovery import (
    FINAL_SUFFIX,
    SkipReason,
    final_name,
    read_final_dir,
    read_secret,
    scan_discovery_dir,
    skip_reason,
)
from poolwatch.errors import ConfigError
from poolwatch.identity import NoWorkerName, target_worker
from poolwatch.limits import DEFAULT_LIMITS, Limits
from poolwatch.model import Role, SourceKind
from poolwatch.settings import Settings
from poolwatch.sources.base import Source, Target
from poolwatch.sources.file import FileSource
from poolwatch.sources.final import FinalSnapshotSource
from poolwatch.sources.probe import ProbeSource, watch_wait
from poolwatch.sources.sglang_log.source import SglangLogSource
from poolwatch.sources.sglang_metrics import SglangMetricsSource

__all__ = [
    "DEFAULT_PROBE_DIR",
    "KINDS",
    "TargetSet",
    "discover_probes",
    "discover_ranks",
    "load_targets_file",
    "make_source",
    "parse_targets_document",
    "static_targets",
]

DEFAULT_PROBE_DIR = "/tmp/poolwatch"
KINDS = tuple(SourceKind)
_LOCATION_KEY = {
    SourceKind.PROBE: "url",
    SourceKind.SGLANG_METRICS: "url",
    SourceKind.SGLANG_LOG: "path",
    SourceKind.FILE: "path",
}

log = logging.getLogger("poolwatch.sources")


def parse_targets_document(doc: Any, where: str) -> list[Target]:
    """The targets of a parsed YAML document; raises ``ConfigError`` naming the bad entry."""
    items = doc.get("targets") if isinstance(doc, Mapping) else None
    if not isinstance(items, list):
        raise ConfigError(f"{where}: expected a mapping with a 'targets' list")
    targets = [_target(item, f"{where}: targets[{i}]") for i, item in enumerate(items)]
    names = [t.name for t in targets]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate is not None:
        raise ConfigError(f"{where}: target name {duplicate!r} is used twice")
    return targets


def _target(item: Any, where: str) -> Target:
    if not isinstance(item, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {type(item).__name__}")
    given = item.get("source")
    if given not in KINDS:
        raise ConfigError(f"{where}.source: expected one of {', '.join(KINDS)}, got {given!r}")
    kind = SourceKind(given)
    key = _LOCATION_KEY[kind]
    location = _text(item, key, where, required=True)
    name = _text(item, "name", where) or f"{kind}:{location}"
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
    return Target(name, kind, location, worker, role, {str(k): v for k, v in labels.items()})


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


def _labels(settings: Settings) -> dict[str, str]:
    ident = settings.identity
    return {"namespace": ident.namespace} if ident.namespace else {}


def static_targets(settings: Settings) -> list[Target]:
    """Targets named by flags/env and the targets file.

    The flags describe the pod's own SGLang (at most one ``--metrics-urls`` server): its probes,
    server and logs all carry the pod's worker name.  Several servers are central mode: each is
    named after its ``host:port``, probes after themselves, and a log cannot be told apart
    (``ConfigError``: list it in a targets file with its worker).  Snapshot files name themselves.
    """
    role, labels = settings.identity.role, _labels(settings)
    t = settings.targets
    own = settings.identity.worker if len(t.metrics_urls) <= 1 else ""
    listed = (
        [(SourceKind.PROBE, u) for u in t.probe_urls]
        + [(SourceKind.SGLANG_METRICS, u) for u in t.metrics_urls]
        + [(SourceKind.SGLANG_LOG, p) for p in t.log_paths]
        + [(SourceKind.FILE, p) for p in t.snapshot_files]
    )
    targets = [
        Target(_name(kind, loc), kind, loc, _flag_worker(kind, loc, own), role, labels)
        for kind, loc in listed
    ]
    if t.targets_file:
        targets += load_targets_file(t.targets_file)
    return targets


def _flag_worker(kind: SourceKind, location: str, own: str) -> str:
    try:
        return target_worker(kind, location, pod_worker="" if kind is SourceKind.FILE else own)
    except NoWorkerName:
        raise ConfigError(
            "POOLWATCH_LOG_PATHS: with several POOLWATCH_METRICS_URLS servers a log cannot be told "
            "apart; list each log with its worker in POOLWATCH_TARGETS_FILE"
        ) from None


def _name(kind: SourceKind, location: str) -> str:
    return f"file:{Path(location).name}" if kind is SourceKind.FILE else f"{kind}:{location}"


def discover_probes(directory: str) -> list[tuple[str, str, str]]:
    """``(target name, url, worker)`` of every probe announced in ``directory`` (bad files skipped)."""
    return [(name, url, worker) for name, url, worker, _ in discover_ranks(directory)]


def discover_ranks(
    directory: str, problems: dict[str, str] | None = None, limits: Limits = DEFAULT_LIMITS
) -> list[tuple[str, str, str, str]]:
    """:func:`discover_probes` plus the path where each rank's final snapshot would be; files
    that were skipped are put in ``problems`` (``{file name: why}``) when it is given."""
    found = []
    entries, skipped = scan_discovery_dir(directory, limits=limits)
    if problems is not None:
        problems.update(skipped)
    for entry in entries:
        rank = f"dp{entry.dp_rank}-tp{entry.tp_rank}-pp{entry.pp_rank}"
        final = str(Path(directory) / final_name(entry.worker, entry.dp_rank, entry.tp_rank, entry.pp_rank))
        found.append((f"probe:{entry.worker}/{rank}", entry.url, entry.worker, final))
    return found


def _vanished(directory: str, live: set[str]) -> list[tuple[str, str]]:
    """``(target name, path)`` of final snapshots whose rank no longer announces itself
    (``live``: the final-snapshot paths of the ranks that still do)."""
    out = []
    for name, _doc in read_final_dir(directory):
        path = str(Path(directory) / name)
        if path not in live:
            out.append((f"final:{name.removesuffix(FINAL_SUFFIX)}", path))
    return out


def make_source(
    target: Target, settings: Settings, clock: Callable[[], float], final_path: str = "", secret: str = ""
) -> Source:
    """The source object that reads ``target`` (a probe's final snapshot is looked for at
    ``final_path`` when the probe stops answering; a discovered probe is shown ``secret``)."""
    max_bytes, limits = settings.scrape.max_body_bytes, settings.limits
    if target.source is SourceKind.PROBE:
        # watch the probe: an answer as soon as its verdict changes, else once per interval
        wait = watch_wait(settings.scrape.scrape_interval, settings.scrape.scrape_timeout)
        return ProbeSource(target, max_bytes, wait, final_path, limits, secret)
    if target.source is SourceKind.SGLANG_METRICS:
        return SglangMetricsSource(target, clock, max_bytes=max_bytes, limits=limits)
    if target.source is SourceKind.SGLANG_LOG:
        return SglangLogSource(target, clock)
    if target.source is SourceKind.FILE:
        return FileSource(target, clock, max_bytes, limits)
    raise ConfigError(f"target {target.name}: unknown source {target.source!r}")


class TargetSet:
    """The current sources: the static ones, plus one per probe found in the discovery directory.

    :meth:`current` is called once per scrape cycle; a source object lives as long as its target
    is unchanged (a log source keeps its file offset), and is replaced when its URL changes.
    """

    def __init__(self, settings: Settings, clock: Callable[[], float]) -> None:
        self._settings = settings
        self._clock = clock
        static = static_targets(settings)
        self._static = [make_source(t, settings, clock) for t in static]
        configured = settings.targets.probe_dir
        self._probe_dir = configured or ("" if static else DEFAULT_PROBE_DIR)
        self._discovered: dict[str, Source] = {}
        self.skipped: dict[str, str] = {}  # discovery files skipped at the last scan, and why
        self._secret = ""  # the node's probe secret at the last scan (shown to discovered probes)

    @property
    def probe_dir(self) -> str:
        return self._probe_dir

    def current(self) -> Sequence[Source]:
        if not self._probe_dir:
            return self._static
        role, labels = self._settings.identity.role, _labels(self._settings)
        fresh: dict[str, Source] = {}
        only = set(self._settings.targets.probe_workers)
        finals: set[str] = set()
        skipped: dict[str, str] = {}
        ranks = discover_ranks(self._probe_dir, skipped, self._settings.limits)
        self._note_skipped(skipped)
        secret, known = read_secret(self._probe_dir) or "", self._secret
        self._secret = secret
        for name, url, worker, final in ranks:
            finals.add(final)
            if only and worker not in only:
                continue
            old = self._discovered.get(name)
            if old is not None and old.target.location == url and secret == known:
                fresh[name] = old
            else:  # the probe's own worker name: several workers may share one directory
                target = Target(name, SourceKind.PROBE, url, worker, role, labels)
                fresh[name] = make_source(target, self._settings, self._clock, final, secret)
        for name, path in _vanished(self._probe_dir, finals):
            old = self._discovered.get(name)
            target = Target(name, SourceKind.PROBE, path, "", role, labels)
            fresh[name] = old or FinalSnapshotSource(target, self._clock)
        self._discovered = fresh
        return [*self._static, *fresh.values()]

    def skipped_by_reason(self) -> dict[SkipReason, int]:
        """Files skipped at the last scan by reason, every reason listed (none while discovery is off)."""
        if not self._probe_dir:
            return {}
        counts = dict.fromkeys(SkipReason, 0)
        for problem in self.skipped.values():
            counts[skip_reason(problem)] += 1
        return counts

    def _note_skipped(self, skipped: dict[str, str]) -> None:
        """Log each newly skipped discovery file once, with why (a FIFO, too large, not loopback...)."""
        for name in sorted(set(skipped) - set(self.skipped)):
            log.warning(
                "event=discovery_file_skipped dir=%s file=%s error=%s", self._probe_dir, name, skipped[name]
            )
        self.skipped = skipped
