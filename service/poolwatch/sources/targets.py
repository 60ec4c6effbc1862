"""Where the sidecar reads from: discovered probe endpoints, or a static list of targets.

*Sidecar mode* needs no per-rank configuration: each probe (one per scheduler rank of the pod)
writes ``<worker>-dp<D>-tp<T>-pp<P>.json`` = ``{"url", "pid", "worker", "ranks", "boot_id",
"started_at"}`` into the discovery directory, which is re-read every scrape cycle (ranks come
and go; a restarted rank has a new ``boot_id``).  With ``--probe-workers`` a sidecar follows only
the probes of those workers (several pods sharing one host directory).  The pod's SGLang
``/metrics`` (``--metrics-urls``) and log (``--log-paths``) describe the same ranks; every worker
name comes from :mod:`poolwatch.identity`, so all three merge into one rank per scheduler.  The
role (``POOLWATCH_ROLE``, when not ``unified``) comes from the sidecar's own environment through
:class:`~poolwatch.settings.sidecar.Settings`.

*Central mode* watches several servers: several ``--metrics-urls``, or a YAML targets file.  The
static targets (flags and the targets file) are read by :mod:`poolwatch.sources.target_config`,
and this module turns targets into sources
(:func:`make_source`) and keeps them current (:class:`TargetSet`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from poolwatch.discovery.directory import SkipReason, scan_discovery_dir, skip_reason
from poolwatch.discovery.files import read_secret
from poolwatch.discovery.final import FINAL_SUFFIX, final_name, read_final_dir
from poolwatch.errors import ConfigError
from poolwatch.limits import DEFAULT_LIMITS, Limits
from poolwatch.model import SourceKind
from poolwatch.settings.sidecar import Settings
from poolwatch.sources.base import Source, Target
from poolwatch.sources.file import FileSource
from poolwatch.sources.final import FinalSnapshotSource
from poolwatch.sources.probe import ProbeSource, watch_wait
from poolwatch.sources.sglang_log.source import SglangLogSource
from poolwatch.sources.sglang_metrics import SglangMetricsSource
from poolwatch.sources.target_config import (
    identity_labels,
    static_targets,
)

__all__ = ["DEFAULT_PROBE_DIR", "TargetSet", "discover_probes", "discover_ranks", "make_source"]

DEFAULT_PROBE_DIR = "/tmp/poolwatch"

log = logging.getLogger("poolwatch.sources")


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
        role, labels = self._settings.identity.role, identity_labels(self._settings)
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
