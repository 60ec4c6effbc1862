"""What an emulated deployment is made of: its workers, ranks, release, model shape, workload and
faults (:class:`ClusterConfig`), checked before anything is built; a :class:`~poolwatch_emulator.
cluster.Cluster` and each of its :class:`~poolwatch_emulator.worker.Worker` read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from poolwatch_emulator.build import ModelShape
from poolwatch_emulator.faults import FAULTS, FaultSpec
from poolwatch_emulator.versions import parse_release
from poolwatch_emulator.workload import WorkloadConfig

__all__ = ["ClusterConfig"]


@dataclass(frozen=True)
class ClusterConfig:
    prefill: int = 1
    decode: int = 1
    unified: int = 0
    tp: int = 1
    dp: int = 1
    version: str = "0.5.4.post1"
    shape: ModelShape = field(default_factory=ModelShape)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    faults: tuple[FaultSpec, ...] = ()
    seed: int = 0
    dt: float = 0.05
    chunked_prefill_size: int = 4096
    decode_log_interval: int = 40
    idle_check_strict: bool = True
    skip_idle: bool = True
    log_dir: Path | None = None
    epoch: float | None = None  # unix time of simulated t=0 (default: now)

    def check(self) -> None:
        """Raise ``ValueError`` naming the first bad setting."""
        release = parse_release(self.version)
        self.shape.check()
        self.workload.check()
        if min(self.prefill, self.decode, self.unified) < 0 or self.prefill + self.decode + self.unified == 0:
            raise ValueError("cluster: give at least one worker (prefill + decode + unified > 0)")
        if (self.prefill == 0) != (self.decode == 0):
            raise ValueError("cluster: PD needs both prefill and decode workers")
        if self.tp < 1 or self.dp < 1 or self.dt <= 0 or self.chunked_prefill_size < self.shape.page_size:
            raise ValueError(
                "cluster: tp, dp >= 1, dt > 0 and chunked_prefill_size >= page_size are required"
            )
        roles = {
            r for r, n in (("prefill", self.prefill), ("decode", self.decode), ("unified", self.unified)) if n
        }
        for spec in self.faults:
            _check_fault(spec, release.name, roles, self.shape)


def _check_fault(spec: FaultSpec, version: str, roles: set[str], shape: ModelShape) -> None:
    info = FAULTS[spec.name]
    if version not in info.emulated_versions:
        raise ValueError(
            f"fault {spec.name} cannot be injected on {version}: only {', '.join(info.emulated_versions)}"
        )
    if not roles & set(info.roles):
        raise ValueError(f"fault {spec.name} needs a {' or '.join(info.roles)} worker")
    if info.needs == "mamba" and shape.mamba_slots is None:
        raise ValueError(f"fault {spec.name} needs a Mamba-hybrid model (shape.mamba_slots)")
    if info.needs == "swa" and shape.swa_kv_tokens is None:
        raise ValueError(f"fault {spec.name} needs a SWA-hybrid model (shape.swa_kv_tokens)")
    if info.needs == "hicache" and shape.host_kv_tokens is None:
        raise ValueError(f"fault {spec.name} needs a HiCache worker (shape.host_kv_tokens)")
