"""Which cluster ``poolwatch demo --fault NAME`` runs, and what it tells about a fault that keeps
the books balanced.

The first classes (the seed, the Mamba and full-KV leaks, HiCache's host pool) run on the demo's
classic PD cluster (0.5.4.post1 unless ``--version`` says otherwise, the default pools).  Every
other fault runs in its catalogue scenario (:mod:`poolwatch_emulator.scenarios`: speculative
decoding, a SWA model, the decode offload, an encoder cache, ...), with the demo's TP size, seed,
log directory and healthy time; ``--version``, ``--prefill`` and ``--decode`` override it.

For the blind classes (*counter*, *stranded*, *in-flight*, *stall*: the conservation gap cannot
see them, or misnames them) :func:`blind_line` says what the emulator knows and a watcher must
infer (:mod:`poolwatch_emulator.truth`), so the demo shows the bug while the pages that should
come are being built.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from poolwatch_emulator import truth
from poolwatch_emulator.build import ModelShape
from poolwatch_emulator.catalogue import FAULTS, FaultInfo
from poolwatch_emulator.cluster_config import ClusterConfig
from poolwatch_emulator.scenarios import scenario_config

if TYPE_CHECKING:
    from poolwatch_emulator.cluster import Cluster
    from poolwatch_emulator.faults import FaultSpec

__all__ = ["blind_line", "demo_config", "is_classic", "narrated"]

BLIND_SIGNS = ("counter", "stranded", "in-flight", "stall")
_CLASSIC_NEEDS = {"mamba", "hicache"}
CLASSIC_VERSION = "0.5.4.post1"


def is_classic(info: FaultInfo) -> bool:
    """Whether the fault runs on the demo's classic PD cluster (a gap fault on the default pools)."""
    pd_role = bool({"prefill", "decode"} & set(info.roles))
    gap = info.sign in ("surplus", "deficit") and info.pool != "encoder"
    return gap and pd_role and set(info.needs) <= _CLASSIC_NEEDS and not info.name.startswith("spec-")


def demo_config(args: argparse.Namespace, fault: FaultSpec, log_dir: Path) -> ClusterConfig:
    """The demo's cluster for ``fault`` (see the module doc)."""
    info = FAULTS[fault.name]
    given = {k: v for k in ("version", "prefill", "decode") if (v := getattr(args, k, None)) is not None}
    common: dict[str, Any] = {"tp": args.tp, "seed": args.seed, "log_dir": log_dir, "faults": (fault,)}
    if not is_classic(info):
        return scenario_config(fault.name, **common, **given)
    shape = ModelShape()
    if "hicache" in info.needs:  # a plain model with HiCache's host tier
        shape = ModelShape(mamba_slots=None, host_kv_tokens=2 * shape.full_kv_tokens)
    base: dict[str, Any] = {"prefill": 1, "decode": 1, "version": CLASSIC_VERSION, "shape": shape}
    return ClusterConfig(**{**base, **common, **given})


def narrated(info: FaultInfo) -> bool:
    """Whether the demo tells the ground truth of the fault (SGLang's pool gap cannot tell it)."""
    return info.sign in BLIND_SIGNS or info.pool == "encoder"


def _tokens(n: int) -> str:
    return f"{n:,} tokens"


def blind_line(cluster: Cluster, info: FaultInfo) -> str | None:
    """What the emulator knows of a blind-class fault right now (None: nothing to tell)."""
    for worker in cluster.workers:
        for rank in worker.ranks:
            where = f"{worker.name} dp{rank.dp_rank}-tp{rank.tp_rank}"
            line = _rank_line(rank, info, cluster.clock.now)
            if line:
                return f"{where}: {line}; the books balance, it should page {info.pages}"
    return None


def _rank_line(rank: Any, info: FaultInfo, now: float) -> str | None:
    kind = "encoder" if info.pool == "encoder" and info.sign == "surplus" else info.sign
    tell = _TELLERS.get(kind)
    return None if tell is None else tell(rank, now)


def _stranded(rank: Any, now: float) -> str | None:
    holds = truth.stranded(rank)
    if not holds:
        return None
    oldest = min(h.since for h in holds)
    owners = ", ".join(sorted({h.owner for h in holds})[:3])
    return (
        f"{len(holds)} stranded holder(s) keep {_tokens(sum(h.tokens for h in holds))} of KV "
        f"(oldest {now - oldest:.0f} s; {owners}{'...' if len(holds) > 3 else ''})"
    )


def _counter(rank: Any, now: float) -> str | None:
    drift = truth.counter_drift(rank)
    if not drift:
        return None
    off = ", ".join(f"{name} off by {d:+,}" for name, d in drift.items())
    return f"{off} while every id is where it belongs (a counter lie, not a double free)"


def _in_flight(rank: Any, now: float) -> str | None:
    deficit, freed = truth.lock_deficit(rank), truth.prefix_freed(rank)
    if not deficit and not freed:
        return None
    return (
        f"tree nodes of {_tokens(deficit)} unlocked under live requests, {freed} prefix slots "
        "freed under them"
    )


def _encoder(rank: Any, now: float) -> str | None:
    state = truth.encoder_state(rank)
    if state is None or state[0] <= state[1]:
        return None
    return f"the encoder cache counts {state[0]:,} free slots of {state[1]:,} (credited more than it gave)"


def _stall(rank: Any, now: float) -> str | None:
    state = truth.encoder_state(rank)
    if rank.running_batch.reqs or not rank.waiting_queue or state is None or not state[2]:
        return None
    return (
        f"{len(rank.waiting_queue)} requests wait, none runs: waiting requests pin "
        f"{state[2]} of the encoder cache's {state[1]} slots ({state[0]} free)"
    )


_TELLERS: dict[str, Callable[[Any, float], str | None]] = {
    "stranded": _stranded,
    "counter": _counter,
    "in-flight": _in_flight,
    "encoder": _encoder,
    "stall": _stall,
}
