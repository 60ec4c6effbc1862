"""The host-pool family: PoolwatchHostPoolGap, HiCache's host-memory KV pool out of balance.  Pure.

SGLang checks no host conservation, so no engine dies of it: a surplus (a host slot free while a
tree node keeps it) is critical at once -- a later backup can overwrite a cached prefix that is then
loaded into another request; a deficit (host slots in no set) is a warning after
``deficit_samples`` samples and ``coarse_hold`` seconds, as the rule's ``for:`` waits.  A snapshot
is a verdict on the host pool's alert whenever the host pool's balance is known.
"""

from __future__ import annotations

from poolwatch.conservation import Balance
from poolwatch.detect import promql as q
from poolwatch.detect.alert import Signal, Verdict, rank_labels, sampled_subject
from poolwatch.detect.config import MixinConfig
from poolwatch.detect.evidence import gather
from poolwatch.detect.family import Family, Judge, Seen, held, pool_verdicts, uses
from poolwatch.detect.schema import AlertDef, Mode, Scope, Severity
from poolwatch.model.rank import Pool

__all__ = ["FAMILY", "HOST_POOL_GAP", "HostBalance"]

HOST_POOL_GAP = "PoolwatchHostPoolGap"
_CONSEQUENCE = (
    "SGLang checks no HiCache host conservation, so it will not crash on this; a host slot "
    "counted twice can be overwritten while a cached prefix still points at it."
)


class HostBalance(Judge):
    """The family's judge: every snapshot of a rank-source that reports a host pool."""

    def signals(self, seen: Seen) -> list[Signal]:
        found = seen.findings.get(Pool.HOST)
        if found is None or found.balance not in (Balance.SURPLUS, Balance.DEFICIT):
            return []
        snap = seen.snap
        [ev] = gather(snap, {Pool.HOST: found}, self.config, lambda f: HOST_POOL_GAP, patient=True).values()
        severity = Severity.CRITICAL if found.balance is Balance.SURPLUS else Severity.WARNING
        text = " ".join([*ev.sentences, _CONSEQUENCE])
        labels = rank_labels(snap.worker, Pool.HOST.value)
        return [
            Signal(HOST_POOL_GAP, sampled_subject(snap), severity, labels, text, float(ev.count), *ev.wait)
        ]

    def signature(self, seen: Seen) -> bool:
        """Whether the host pool's balance is known."""
        found = seen.findings.get(Pool.HOST)
        return found is not None and found.balance is not Balance.UNKNOWN

    def judged(self, seen: Seen) -> set[Verdict]:
        return pool_verdicts(seen.snap.worker, [Pool.HOST] if self.signature(seen) else [], HOST_POOL_GAP)


def alerts(config: MixinConfig) -> tuple[AlertDef, ...]:
    d = config.detector
    return (
        AlertDef(
            HOST_POOL_GAP,
            Scope.POOL,
            Mode.SAMPLED,
            "HiCache's host-memory KV pool does not balance: host slots are lost or counted twice.",
            "The host pool's free slots, the prefix tree's host copies and the cache controller's "
            "in-flight operations do not add up to its size. Surplus (a host slot freed while a node "
            "keeps it): critical at once. Deficit (host slots in no set): warning, after a hold. "
            "SGLang checks no host conservation, so neither crashes the server.",
            (
                held(
                    Severity.CRITICAL,
                    q.HOST_SURPLUS,
                    f"{{{{ $value }}}} HiCache host slot(s) on {q.WHERE} are counted twice (free and on a "
                    "tree node): a later backup can overwrite a cached prefix that is then loaded back "
                    "into another request. Drain and restart the worker.",
                    d,
                ),
                held(
                    Severity.WARNING,
                    q.HOST_DEFICIT,
                    f"{{{{ $value }}}} HiCache host slot(s) on {q.WHERE} are lost (in no free list, tree "
                    "node or operation): the host cache shrinks until a restart.",
                    d,
                    d.coarse_hold,
                ),
            ),
        ),
    )


FAMILY = Family(
    name="host_pool",
    title="HiCache host pool",
    about="Whether HiCache's host-memory KV pool (SGLang) balances: host slots counted twice or lost.",
    metrics=uses("poolwatch_pool_conservation_gap_slots"),
    alerts=alerts,
    sampled=HostBalance,
)
