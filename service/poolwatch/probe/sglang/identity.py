"""Who this scheduler rank is: its role, ranks and model (the neutral probe adds the worker's name,
the engine and its release)."""

from __future__ import annotations

from typing import Any

from poolwatch.model.rank import Role, WorkerId
from poolwatch.probe.core.reading import Reading

__all__ = ["ROLES", "local_index", "rank_identity"]

ROLES = {"prefill": Role.PREFILL, "decode": Role.DECODE}  # disaggregation_mode's values; else unified


def _rank(sched: Any, reading: Reading, name: str) -> int:
    return reading.whole(sched, name) or 0


def rank_identity(sched: Any, reading: Reading, role: Role) -> WorkerId:
    """The rank's role, ranks and model (``worker`` left for the neutral probe to name)."""
    return WorkerId(
        worker="",
        role=role,
        dp_rank=_rank(sched, reading, "dp_rank"),
        tp_rank=_rank(sched, reading, "tp_rank"),
        pp_rank=_rank(sched, reading, "pp_rank"),
        model=reading.first_name(sched, "server_args.served_model_name", "server_args.model_path"),
        engine="sglang",
    )


def local_index(sched: Any, reading: Reading) -> int:
    """This rank's index on its node (its GPU id when known), for ``POOLWATCH_PROBE_PORT_BASE``."""
    gpu = reading.whole(sched, "gpu_id")
    return gpu if gpu is not None else _rank(sched, reading, "tp_rank")
