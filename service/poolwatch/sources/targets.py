"""Where the sidecar reads from: discovered probe endpoints, or a static list of targets.

*Sidecar mode* needs no per-rank configuration: each probe (one per scheduler rank of the pod)
writes ``<worker>-dp<D>-tp<T>-pp<P>.json`` = ``{"url", "pid", "worker", "ranks", "boot_id",
"started_at"}`` into the discovery directory, which is re-read every scrape cycle (ranks come
and go; a restarted rank has a new ``boot_id``).  With ``--probe-workers`` a sidecar follows only
the probes of those workers (several pods sharing one host directory).  The pod's SGLang
``/metrics`` (``--metrics-urls``) and log (``--log-paths``) describe the same ranks; every worker
name comes from :mod:`poolwatch.naming`, so all three merge into one rank per scheduler.  The
role (``POOLWATCH_ROLE``, when not ``unified``) comes from the sidecar's own environment through
:class:`~poolwatch.settings.sidecar.Settings`.

*Central mode* watches several servers: several ``--metrics-urls``, or a YAML targets file.  The
static targets (flags and the targets file) are read by :mod:`poolwatch.sources.target_config`,
and this module turns targets into sources
(:func:`make_source`) and keeps them current (:class:`TargetSet`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from poolwatch.detect.families.probe_directory import REFUSED
from poolwatch.discovery.directory import SkipReason, scan_discovery_dir, skip_reason
from poolwatch.discovery.files import SECRET_FILE, load_secret
from poolwatch.discovery.final import FINAL_SUFFIX, ForgedFinalError, final_name, final_names, final_stat
from poolwatch.discovery.safety import UnsafePathError, default_directory
from poolwatch.errors import ConfigError
from poolwatch.limits import DEFAULT_LIMITS, Limits
from poolwatch.model.rank import SourceKind
from poolwatch.settings.sidecar import Settings
from poolwatch.sources.base import Source, Target
from poolwatch.sources.engine import SourceOptions, sources_for
from poolwatch.sources.file import FileSource
from poolwatch.sources.final import FinalSnapshotSource, check_final
from poolwatch.sources.probe_dir import LOST_REASONS, ProbeDirectoryWatch
from poolwatch.sources.probe_source import ProbeSource, watch_wait
from poolwatch.sources.target_config import (
    identity_labels,
    static_targets,
)
from poolwatch.target_state import DirectoryHealth

__all__ = ["TargetSet", "discover_probes", "discover_ranks", "make_source"]

MAX_BOOTS = 4096  # announced boots remembered for the final snapshots of vanished ranks

log = logging.getLogger("poolwatch.sources")


def discover_probes(directory: str) -> list[tuple[str, str, str]]:
    """``(target name, url, worker)`` of every probe announced in ``directory`` (bad files skipped)."""
    return [(name, url, worker) for name, url, worker, _, _ in discover_ranks(directory)]


def discover_ranks(
    directory: str, problems: dict[str, str] | None = None, limits: Limits = DEFAULT_LIMITS
) -> list[tuple[str, str, str, str, str]]:
    """:func:`discover_probes` plus the path where each rank's final snapshot would be and the boot
    it announces; files that were skipped are put in ``problems`` (``{file name: why}``) when it is
    given."""
    found = []
    entries, skipped = scan_discovery_dir(directory, limits=limits)
    if problems is not None:
        problems.update(skipped)
    for entry in entries:
        rank = f"dp{entry.dp_rank}-tp{entry.tp_rank}-pp{entry.pp_rank}"
        final = str(Path(directory) / final_name(entry.worker, entry.dp_rank, entry.tp_rank, entry.pp_rank))
        found.append((f"probe:{entry.worker}/{rank}", entry.url, entry.worker, final, entry.boot_id))
    return found


def make_source(
    target: Target, settings: Settings, clock: Callable[[], float], final_path: str = "", secret: str = ""
) -> Source:
    """The source object that reads ``target`` (a probe's final snapshot is looked for at
    ``final_path`` when the probe stops answering; a discovered probe is shown ``secret``)."""
    max_bytes, limits = settings.scrape.max_body_bytes, settings.limits
    if target.source == SourceKind.PROBE:
        # watch the probe: an answer as soon as its verdict changes, else once per interval
        wait = watch_wait(settings.scrape.scrape_interval, settings.scrape.scrape_timeout)
        return ProbeSource(target, max_bytes, wait, final_path, limits, secret)
    if target.source == SourceKind.FILE:
        return FileSource(target, clock, max_bytes=max_bytes, limits=limits)
    room = sources_for(target.source)  # an engine's own /metrics or log: its room reads it
    if room is None:
        raise ConfigError(f"target {target.name}: unknown source {target.source!r}")
    return room.make(target, clock, SourceOptions(max_bytes, limits))


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
        self._probe_dir = configured or ("" if static else default_directory(os.environ))
        self._discovered: dict[str, Source] = {}
        self.skipped: dict[str, str] = {}  # discovery files skipped at the last scan, and why
        self._secret = ""  # the node's probe secret at the last scan (proven to discovered probes)
        self._boots: dict[str, str] = {}  # final-snapshot path -> the boot its rank last announced
        self._workers: dict[str, str] = {}  # final-snapshot path -> the worker that announced it
        self._verdicts: dict[str, tuple[tuple[int, ...], str]] = {}  # final path -> (stat, problem)
        self.directory = ProbeDirectoryWatch(self._probe_dir)

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
        secret, known = self._load_secret(skipped), self._secret
        self._secret = secret
        for name, url, worker, final, boot in ranks:
            finals.add(final)
            self._remember(final, boot, worker)
            if only and worker not in only:
                continue
            old = self._discovered.get(name)
            if old is not None and old.target.location == url and secret == known:
                fresh[name] = old
            else:  # the probe's own worker name: several workers may share one directory
                target = Target(name, SourceKind.PROBE, url, worker, role, labels)
                fresh[name] = make_source(target, self._settings, self._clock, final, secret)
        for name, path in self._vanished(finals, skipped):
            old = self._discovered.get(name)
            # the worker it announced: the rank's target-down alert is inhibited by its crash
            target = Target(name, SourceKind.PROBE, path, self._workers.get(path, ""), role, labels)
            fresh[name] = old or FinalSnapshotSource(target, self._clock, secret, self._boots[path])
        self._note_skipped(skipped)
        self.directory.observe(len(ranks))
        self._discovered = fresh
        return [*self._static, *fresh.values()]

    def _load_secret(self, skipped: dict[str, str]) -> str:
        """The node's secret; one the sidecar must not trust is reported (``unsafe``), not used."""
        try:
            return load_secret(self._probe_dir) or ""
        except UnsafePathError as exc:
            if self._probe_dir not in skipped:  # an unsafe directory is already reported as such
                skipped[SECRET_FILE] = f"{SkipReason.UNSAFE}: {exc}"[:200]
            return ""

    def _remember(self, final: str, boot: str, worker: str) -> None:
        self._boots.pop(final, None)
        self._boots[final] = boot  # the newest last: the oldest go first past MAX_BOOTS
        self._workers[final] = worker
        while len(self._boots) > MAX_BOOTS:
            oldest = next(iter(self._boots))
            del self._boots[oldest]
            self._workers.pop(oldest, None)

    def _vanished(self, live: set[str], skipped: dict[str, str]) -> list[tuple[str, str]]:
        """``(target name, path)`` of the final snapshots whose rank no longer announces itself
        (``live``: the final-snapshot paths of the ranks that still do) and that hold for the boot
        this sidecar saw it announce; a forged, future-dated or other boot's one is put in
        ``skipped`` (``forged``).  A final of a boot never seen announced (one from before this
        sidecar started) is left alone: nothing is replayed after a restart."""
        out, folder, verdicts = [], Path(self._probe_dir), {}
        for name in final_names(folder):
            path = str(folder / name)
            if path in live or path not in self._boots:
                continue
            verdict = self._verdict(path, self._boots[path])
            verdicts[path] = verdict
            if verdict[1]:
                skipped[name] = verdict[1]
            else:
                out.append((f"final:{name.removesuffix(FINAL_SUFFIX)}", path))
        self._verdicts = verdicts  # only the files still there: forgotten when they go
        return out

    def _verdict(self, path: str, boot: str) -> tuple[tuple[int, ...], str]:
        """``(the file's identity, problem)``: checked again only when the file changes."""
        info = final_stat(path)
        if info is None:
            return (), ""
        key = (info.st_ino, info.st_size, info.st_mtime_ns)
        cached = self._verdicts.get(path)
        if cached is not None and cached[0] == key:
            return cached
        try:
            check_final(path, self._secret, self._clock(), boot, float("inf"))
        except ForgedFinalError as exc:
            return key, f"{SkipReason.FORGED}: {exc}"[:200]
        except UnsafePathError as exc:
            return key, f"{SkipReason.UNSAFE}: {exc}"[:200]
        except (OSError, ValueError, RecursionError):
            pass  # not a snapshot, vanished: the source says so when it reads it
        return key, ""

    def skipped_by_reason(self) -> dict[SkipReason, int]:
        """Files skipped at the last scan by reason, every reason listed (none while discovery is off)."""
        if not self._probe_dir:
            return {}
        counts = dict.fromkeys(SkipReason, 0)
        for problem in self.skipped.values():
            counts[skip_reason(problem)] += 1
        return counts

    def directory_health(self) -> DirectoryHealth | None:
        """What the last scan found of the probe directory, for the sidecar's own alerts
        (:mod:`poolwatch.detect.families.probe_directory`); None while discovery is off."""
        if not self._probe_dir:
            return None
        watch = self.directory
        lost = watch.state if watch.had_probes and watch.state in LOST_REASONS else ""
        refused = {n: why for n, why in self.skipped.items() if skip_reason(why).value in REFUSED}
        return DirectoryHealth(self._probe_dir, lost, refused)

    def directory_lost(self) -> dict[str, int]:
        """Whether the directory that had probes is lost, by reason (none while discovery is off)."""
        return self.directory.lost() if self._probe_dir else {}

    def _note_skipped(self, skipped: dict[str, str]) -> None:
        """Log each newly skipped discovery file once, with why (a FIFO, too large, not loopback...)."""
        for name in sorted(set(skipped) - set(self.skipped)):
            log.warning(
                "event=discovery_file_skipped dir=%s file=%s error=%s", self._probe_dir, name, skipped[name]
            )
        self.skipped = skipped
