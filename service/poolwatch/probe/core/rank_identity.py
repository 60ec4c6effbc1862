"""Who a probed rank is: its ranks read once per role from the room's reader, its worker name from
the probe's settings or the pod's environment, and the engine and release it runs.

A rank's identity never changes while it lives (ranks, model and name are fixed at start; only the
role a PD worker plays is asked per sample), so it is read once per role and kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from poolwatch.model.rank import Role, WorkerId
from poolwatch.naming import worker_name
from poolwatch.probe.core.engine import Reader, Release
from poolwatch.probe.core.reading import Reading

__all__ = ["RankIdentity"]


class RankIdentity:
    """One rank's :class:`~poolwatch.model.rank.WorkerId` per role, read from ``reader`` once."""

    def __init__(
        self,
        engine: str,
        release: Release,
        reader: Reader,
        *,
        worker: str | None,
        environ: Mapping[str, str],
    ) -> None:
        self.engine, self.release, self.reader = engine, release, reader
        self.name = worker or worker_name(environ)
        self._by_role: dict[Role, WorkerId] = {}

    def of(self, role: Role, reading: Reading) -> WorkerId:
        """Who this rank is, in ``role``."""
        found = self._by_role.get(role)
        if found is None:
            found = replace(
                self.reader.identify(reading, role),
                worker=self.name,
                engine=self.engine,
                release=self.release.version,
                release_verified=self.release.verified,
            )
            self._by_role[role] = found
        return found
