"""One SGLang scheduler rank, as the SGLang room reads it: the cheap sample, who the rank is, and
its censuses (the Mamba pool's and full KV's, :mod:`~poolwatch.probe.sglang.censuses`).

A read is one :func:`~poolwatch.probe.sglang.snapshot.take_sample` pass: O(live requests), Python
ints and ``len()`` only.  A long waiting queue is not walked at every sample: its copy-on-write
Mamba holders are recalled from the last exact scan (:class:`~poolwatch.probe.sglang.waiting.
WaitingHolders`), except when the probe asks for an exact read -- at SGLang's idle hook and
whenever a census is due, since a census compares the free list with exactly these holders.
"""

from __future__ import annotations

from collections.abc import Mapping

from poolwatch.model.rank import Role, WorkerId
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.engine import EngineSample, ReadAsk, Release
from poolwatch.probe.core.reading import Reading
from poolwatch.probe.sglang.censuses import KvCensus, MambaCensus
from poolwatch.probe.sglang.identity import ROLES, local_index, rank_identity
from poolwatch.probe.sglang.shapes import Shape, for_tree, shape_of
from poolwatch.probe.sglang.snapshot import idle_check_strict, take_sample
from poolwatch.probe.sglang.totals import Memo
from poolwatch.probe.sglang.waiting import WaitingHolders
from poolwatch.probe.sglang.waits import SglangWaits

__all__ = ["SglangReader"]


class SglangReader:
    """The reads of one rank; what did not change is kept from one read to the next."""

    def __init__(
        self,
        scheduler: object,
        config: ProbeConfig,
        release: Release,
        environ: Mapping[str, str],
    ) -> None:
        self.scheduler = scheduler
        self.shape: Shape = for_tree(shape_of(release), _tree_of(scheduler))
        self.waiting = WaitingHolders()  # the waiting queue's Mamba holders between exact scans
        self.memo = Memo()
        self.idle_check_strict: bool | None = idle_check_strict(self.shape, environ)
        self.censuses = (MambaCensus(scheduler, self.shape), KvCensus(scheduler, self.shape))
        self.waits = SglangWaits(scheduler, self.shape, environ)  # PD transfer owners and progress

    def read(self, reading: Reading, ask: ReadAsk) -> EngineSample:
        sample = take_sample(
            self.scheduler,
            self.shape,
            reading,
            waiting=self.waiting,
            exact_waiting=ask.exact,
            memo=self.memo,
        )
        role = ROLES.get(sample.role, Role.UNIFIED)
        waits = self.waits.read(sample.role, sample.live, sample.page, reading)
        return EngineSample(role, sample.phase, sample.pools, sample.queues, detail=sample, waits=waits)

    def identify(self, reading: Reading, role: Role) -> WorkerId:
        return rank_identity(self.scheduler, reading, role)

    def local_index(self, reading: Reading) -> int:
        return local_index(self.scheduler, reading)


def _tree_of(scheduler: object) -> object:
    """The scheduler's prefix tree, or None where reading it fails (a hostile or half-built
    scheduler: the family's own shape is read then, and the probe never raises into the engine)."""
    try:
        return getattr(scheduler, "tree_cache", None)
    except Exception:
        return None
