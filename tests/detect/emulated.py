"""Emulated deployments where one fault can strike (:func:`scenario`), for the detector tests to run
under :class:`rigs.emulated.watched.Watched`."""

from __future__ import annotations

from typing import Any

from poolwatch_emulator.build import ModelShape
from poolwatch_emulator.cluster_config import ClusterConfig
from poolwatch_emulator.faults import FAULTS, parse_fault
from poolwatch_emulator.workload import WorkloadConfig
from rigs.emulated.watched import EPOCH

SWA_SHAPE = ModelShape(mamba_slots=None, swa_kv_tokens=131_072, page_size=16, context_len=32_768)
ABORTY = WorkloadConfig(rate=12.0, abort_fraction=0.3, abort_within_s=3.0)  # many aborts, a queue


def scenario(fault: str, trigger: str = "", **overrides: Any) -> ClusterConfig:
    """A deployment where ``fault`` can strike: its roles (unified when it can), its model shape,
    the newest release it exists in, and traffic that gives it chances soon."""
    info = FAULTS[fault]
    pd = "unified" not in info.roles
    base: dict[str, Any] = {
        "prefill": int(pd),
        "decode": int(pd),
        "unified": int(not pd),
        "version": info.emulated_versions[-1],
        "shape": SWA_SHAPE if "swa" in info.needs else ModelShape(context_len=32_768),
        "workload": ABORTY if "abort" in fault else WorkloadConfig(),
        "faults": (parse_fault(f"{fault}{trigger}"),),
        "seed": 7,
        "epoch": EPOCH,
    }
    base.update(overrides)
    return ClusterConfig(**base)
