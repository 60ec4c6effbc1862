"""A faithful emulator of SGLang scheduler ranks, for demos, tests and benchmarks.

No GPU, no SGLang: pools with SGLang's shapes and attribute names (torch free lists, imported
lazily), a scheduler per rank with SGLang's state and method names, SGLang's idle check and its
crash, named fault reproductions, a seeded workload, and the faces a real worker shows
(``/metrics``, logs, ``/get_server_info``).  See ``Cluster`` to run one.
"""

from __future__ import annotations

from poolwatch_emulator.build import ModelShape
from poolwatch_emulator.cluster import Cluster
from poolwatch_emulator.cluster_config import ClusterConfig
from poolwatch_emulator.faces import WorkerServer, attach_probes, metrics_text, server_info
from poolwatch_emulator.faults import FAULTS, FaultInfo, FaultSpec, parse_fault
from poolwatch_emulator.scheduler import Scheduler
from poolwatch_emulator.versions import RELEASES, Release, parse_release
from poolwatch_emulator.worker import Worker
from poolwatch_emulator.workload import WorkloadConfig

__all__ = [
    "FAULTS",
    "RELEASES",
    "Cluster",
    "ClusterConfig",
    "FaultInfo",
    "FaultSpec",
    "ModelShape",
    "Release",
    "Scheduler",
    "Worker",
    "WorkerServer",
    "WorkloadConfig",
    "attach_probes",
    "metrics_text",
    "parse_fault",
    "parse_release",
    "server_info",
]
