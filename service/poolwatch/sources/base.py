"""What every source of snapshots looks like to the scrape loop.

A *target* is one place to read (a probe endpoint, an SGLang ``/metrics`` URL, a log file, a
snapshot file); a *source* is the object that reads one target and turns what it finds into
:class:`~poolwatch.model.snapshot.Snapshot` values.  Sources keep per-target state (a log offset, the
last idle observation), so there is one source object per target.

A source raises :class:`poolwatch.errors.ScrapeError` (with a bounded reason) for a failed
read; the scrape loop records it and carries on with the other targets.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

import httpx

from poolwatch.errors import ScrapeError
from poolwatch.limits import DEFAULT_LIMITS, Limits
from poolwatch.model.rank import Role, SourceKind
from poolwatch.model.snapshot import Snapshot
from poolwatch.sources.http import get_json, join_url

__all__ = ["BoundedSource", "Source", "Target", "with_target_identity"]


@dataclass(frozen=True, slots=True)
class Target:
    """One place to read, with the identity its snapshots carry when the payload lacks one."""

    name: str  # unique among targets, e.g. "probe:prefill-0/dp0-tp0-pp0"
    source: SourceKind
    location: str  # URL or file path
    worker: str = ""
    role: Role = Role.UNIFIED
    labels: Mapping[str, str] = field(default_factory=dict)


@runtime_checkable
class Source(Protocol):
    """Reads one target: everything the scrape loop asks of a source.

    A source may subclass this protocol to take the defaults of ``long_poll`` and ``close``."""

    @property
    def target(self) -> Target: ...

    async def scrape(self, client: httpx.AsyncClient) -> list[Snapshot]:
        """Read the target once; raise ``ScrapeError`` on failure."""
        ...

    @property
    def long_poll(self) -> bool:
        """True when a request itself waits at the target for news (a watched probe): the loop
        gives it its own lane and no scrape slot."""
        return False

    def close(self) -> None:
        """Release what the source holds (a log file) when its target goes away."""
        return None

    def last_word_pending(self) -> bool:
        """True when a target that stopped answering has left a last word not yet delivered (a
        probe's final snapshot): the loop, backing off, scrapes again at once."""
        return False


class BoundedSource(Source):
    """A source that reads at most ``max_bytes`` of its target per scrape and parses it within
    ``limits`` (a snapshot file, an engine's ``/metrics`` page): what its constructor keeps."""

    def __init__(
        self,
        target: Target,
        clock: Callable[[], float],
        *,
        max_bytes: int = 4 << 20,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        self._target = target
        self._clock = clock
        self._max_bytes = max_bytes
        self._limits = limits
        self._asked: dict[str, float] = {}  # when each side document was last asked for

    @property
    def target(self) -> Target:
        return self._target

    async def side_document(self, client: httpx.AsyncClient, path: str, every_s: float) -> Any:
        """The JSON document at ``path`` of the target (a server's static facts: its sizes, its
        release), asked for at most every ``every_s`` seconds; None between, and when it fails
        (such a document is optional: what it says stays as it was)."""
        now = self._clock()
        last = self._asked.get(path)
        if last is not None and now - last < every_s:
            return None
        self._asked[path] = now
        try:
            return await get_json(client, join_url(self._target.location, path), self._max_bytes)
        except ScrapeError:
            return None


def with_target_identity(snap: Snapshot, target: Target) -> Snapshot:
    """The target's worker name and role win when it has them (the sidecar knows its pod)."""
    worker = snap.worker
    if target.worker:
        worker = replace(worker, worker=target.worker)
    if target.role is not Role.UNIFIED:
        worker = replace(worker, role=target.role)
    if not worker.instance:
        worker = replace(worker, instance=target.labels.get("instance", ""))
    return snap if worker == snap.worker else replace(snap, worker=worker)
