"""A rank's final snapshot: what its probe wrote just before the engine killed it.

When the probe sees that its rank dies next -- SGLang's strict idle check about to raise (a fully
idle rank with a pool out of balance), a vLLM block freed at ``ref_cnt`` 0 whose next allocation
fails vLLM's assert -- it writes the snapshot that proves it -- pool, sign, slot ids, the hook where
the fault was first seen -- into the discovery directory (:func:`poolwatch.discovery.final.write_final`),
signed with the node's secret, before SGLang raises.  The sidecar reads it in two places:

* the rank's :class:`~poolwatch.sources.probe_source.ProbeSource`, when its request fails (the process is
  gone but its discovery file is still there): it answers with the final snapshot once;
* a :class:`FinalSnapshotSource`, for a final file whose rank no longer has a discovery file (the
  process removed it on its way out): it delivers the snapshot once.

Either way the rank is gone, and its target is reported *down* (:class:`RankExited`, a scrape
failure that carries the last word): a crashed pod's targets never read ``up``.

Either way a final snapshot is delivered only when it holds (:func:`check_final`): signed with
the node's secret, marked final, taken no later than now (plus :data:`MAX_SKEW_S`) and at most
``max_age`` seconds ago, and of the boot this sidecar saw the rank announce.  So a forged or
future-dated file never pages, and after a sidecar restart nothing is replayed: the new sidecar
never saw the dead rank's boot announced.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx

from poolwatch.codec.snapshot import parse_snapshot
from poolwatch.discovery.final import ForgedFinalError, read_final
from poolwatch.errors import PayloadError, Reason, ScrapeError
from poolwatch.model.snapshot import Snapshot
from poolwatch.sources.base import Source, Target, with_target_identity

__all__ = [
    "MAX_AGE_S",
    "MAX_SKEW_S",
    "FinalSnapshotSource",
    "RankExited",
    "StaleFinalError",
    "check_final",
    "load_final",
]

MAX_AGE_S = 300.0  # a final snapshot older than this (a sidecar restarted long after) is old news
MAX_SKEW_S = 5.0  # a final snapshot taken later than now + this is future-dated: forged


class RankExited(ScrapeError):
    """The rank is gone: its probe stopped answering and left a final snapshot, or its discovery
    file was removed.  The target is down; ``last_word`` holds the final snapshot the first time
    it is read (the scrape loop stores it before recording the failure)."""

    def __init__(self, reason: Reason, message: str, last_word: Sequence[Snapshot] = ()) -> None:
        super().__init__(reason, message)
        self.last_word = tuple(last_word)


class StaleFinalError(ValueError):
    """A genuine final snapshot, but old news: taken more than ``max_age`` seconds ago, or in
    another life of the rank than the one this sidecar saw announced."""


def check_final(path: str | Path, secret: str, now: float, boot: str, max_age: float = MAX_AGE_S) -> Snapshot:
    """The final snapshot at ``path`` if it holds (see the module's docstring); else raises
    :class:`~poolwatch.discovery.final.ForgedFinalError` (forged, future-dated),
    :class:`StaleFinalError` (old news, another boot's), ``OSError`` or ``ValueError`` (absent,
    unsafe, not a snapshot)."""
    snap = parse_snapshot(read_final(path, secret))
    if not snap.final:
        raise ForgedFinalError("not marked final")
    if snap.taken_at > now + MAX_SKEW_S:
        raise ForgedFinalError(f"taken {snap.taken_at - now:.0f} s in the future")
    if snap.boot_id != boot:
        raise StaleFinalError(f"boot {snap.boot_id[:40]!r} is not the rank's announced boot: another life's")
    if now - snap.taken_at > max_age:
        raise StaleFinalError(f"taken {now - snap.taken_at:.0f} s ago: old news")
    return snap


def load_final(
    path: str | Path, secret: str, now: float, boot: str, max_age: float = MAX_AGE_S
) -> Snapshot | None:
    """:func:`check_final`, or ``None`` when it does not hold."""
    try:
        return check_final(path, secret, now, boot, max_age)
    except (OSError, ValueError, RecursionError):
        return None


class FinalSnapshotSource(Source):
    """Delivers one vanished rank's final snapshot once (``target.location`` is the file; ``boot``
    the boot id its discovery file announced while this sidecar watched it); every scrape reports
    the rank gone (:class:`RankExited`), the first with the snapshot."""

    def __init__(
        self, target: Target, clock: Callable[[], float], secret: str, boot: str, max_age: float = MAX_AGE_S
    ) -> None:
        self._target = target
        self._clock = clock
        self._secret, self._boot = secret, boot
        self._max_age = max_age
        self._sent = ""
        self._read = False

    @property
    def target(self) -> Target:
        return self._target

    async def scrape(self, client: httpx.AsyncClient) -> list[Snapshot]:
        where, now = self._target.location, self._clock()
        self._read = True
        gone = f"{where}: the rank exited (its discovery file was removed)"
        try:
            snap = await asyncio.to_thread(check_final, where, self._secret, now, self._boot, self._max_age)
        except StaleFinalError:
            raise RankExited(Reason.CONNECT, gone) from None
        except ForgedFinalError as exc:
            raise PayloadError(Reason.SCHEMA, f"{where}: refused final snapshot: {exc}") from None
        except (OSError, ValueError, RecursionError) as exc:
            raise PayloadError(Reason.SCHEMA, f"{where}: not a final snapshot: {str(exc)[:120]}") from None
        key = f"{snap.boot_id}/{snap.seq}"
        if key == self._sent:
            raise RankExited(Reason.CONNECT, gone)
        self._sent = key
        last_word = [with_target_identity(snap, self._target)]
        raise RankExited(Reason.CONNECT, f"{gone}; its final snapshot delivered", last_word)

    def last_word_pending(self) -> bool:
        return not self._read  # the first scrape reads it at once (no spread before it)
