"""Who this scheduler rank is: worker name, role, ranks, model and SGLang version."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from poolwatch.identity import worker_name
from poolwatch.model import Role, WorkerId
from poolwatch.probe.core.access import MISSING, Reading

__all__ = ["local_index", "sglang_version", "worker_identity"]

_ROLES = {"prefill": Role.PREFILL, "decode": Role.DECODE}


def sglang_version() -> str:
    """The installed SGLang's version ("" when SGLang is not installed, e.g. the emulator)."""
    from importlib import metadata

    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return ""


def _rank(sched: Any, reading: Reading, name: str) -> int:
    value = reading.attr(sched, name, optional=True)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _model(sched: Any, reading: Reading) -> str:
    for path in ("server_args.served_model_name", "server_args.model_path"):
        value = reading.attr(sched, path, optional=True)
        if isinstance(value, str) and value:
            return value
    return ""


def worker_identity(
    sched: Any, reading: Reading, role: str, version: str, environ: Mapping[str, str]
) -> WorkerId:
    """The rank's identity, named the way the sidecar names it (:func:`poolwatch.identity.worker_name`)."""
    return WorkerId(
        worker=worker_name(environ),
        role=_ROLES.get(role, Role.UNIFIED),
        dp_rank=_rank(sched, reading, "dp_rank"),
        tp_rank=_rank(sched, reading, "tp_rank"),
        pp_rank=_rank(sched, reading, "pp_rank"),
        model=_model(sched, reading),
        sglang_version=version,
    )


def local_index(sched: Any, reading: Reading) -> int:
    """This rank's index on its node (its GPU id when known), for ``POOLWATCH_PROBE_PORT_BASE``."""
    gpu = reading.attr(sched, "gpu_id", optional=True)
    if isinstance(gpu, int) and gpu is not MISSING and not isinstance(gpu, bool):
        return gpu
    return _rank(sched, reading, "tp_rank")
