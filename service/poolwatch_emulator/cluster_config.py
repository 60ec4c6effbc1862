"""What an emulated deployment is made of: its workers, ranks, release, model shape, workload and
faults (:class:`ClusterConfig`), checked before anything is built; a :class:`~poolwatch_emulator.
cluster.Cluster` and each of its :class:`~poolwatch_emulator.worker.Worker` read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from poolwatch_emulator.build import ModelShape
from poolwatch_emulator.encoder_cache import EncoderCacheConfig
from poolwatch_emulator.faults import FAULTS, FaultSpec
from poolwatch_emulator.spec import SpecConfig
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
    speculative: SpecConfig | None = None  # EAGLE speculative decoding (spec v2's books; 0.5.9+)
    waiting_timeout_s: float = 300.0  # SGLANG_DISAGGREGATION_WAITING_TIMEOUT: a decode gives up on its KV
    decode_offload: bool = False  # --disaggregation-decode-enable-offload-kvcache (0.5.4.post1's manager)
    encoder_cache: EncoderCacheConfig | None = None  # multimodal / enc-dec workers (vLLM's manager)

    def features(self) -> set[str]:
        """What the deployment has, in ``FaultInfo.needs``'s words."""
        s = self.shape
        have = {
            "mamba": s.mamba_slots is not None,
            "swa": s.swa_kv_tokens is not None,
            "hicache": s.host_kv_tokens is not None,
            "paged": s.page_size > 1,
            "spec": self.speculative is not None,
            "offload": self.decode_offload,
            "mm": self.encoder_cache is not None and self.encoder_cache.kind == "mm",
            "enc-dec": self.encoder_cache is not None and self.encoder_cache.kind == "enc-dec",
        }
        return {name for name, on in have.items() if on}

    def check(self) -> None:
        """Raise ``ValueError`` naming the first bad setting."""
        release = parse_release(self.version)
        self.shape.check()
        self.workload.check()
        if min(self.prefill, self.decode, self.unified) < 0 or self.prefill + self.decode + self.unified == 0:
            raise ValueError("cluster: give at least one worker (prefill + decode + unified > 0)")
        if (self.prefill == 0) != (self.decode == 0):
            raise ValueError("cluster: PD needs both prefill and decode workers")
        if self.decode_offload and (release.name != "0.5.4.post1" or not self.decode):
            raise ValueError(
                "cluster: decode_offload needs PD decode workers on 0.5.4.post1 (the offload manager "
                "the emulator models)"
            )
        if self.encoder_cache is not None:
            self.encoder_cache.check()
        if self.waiting_timeout_s <= 0:
            raise ValueError("cluster: waiting_timeout_s must be > 0")
        if self.tp < 1 or self.dp < 1 or self.dt <= 0 or self.chunked_prefill_size < self.shape.page_size:
            raise ValueError(
                "cluster: tp, dp >= 1, dt > 0 and chunked_prefill_size >= page_size are required"
            )
        if self.speculative is not None:
            self.speculative.check(self.shape.page_size, release.name)
        roles = {
            r for r, n in (("prefill", self.prefill), ("decode", self.decode), ("unified", self.unified)) if n
        }
        for spec in self.faults:
            _check_fault(spec, release.name, roles, self.features())


_NEEDS = {
    "mamba": "a Mamba-hybrid model (shape.mamba_slots)",
    "swa": "a SWA-hybrid model (shape.swa_kv_tokens)",
    "hicache": "a HiCache worker (shape.host_kv_tokens)",
    "paged": "page_size > 1 (shape.page_size)",
    "spec": "speculative decoding (speculative=SpecConfig())",
    "offload": "the decode KV offload (decode_offload=True)",
    "mm": "a multimodal encoder cache (encoder_cache=EncoderCacheConfig())",
    "enc-dec": "an encoder-decoder cache (encoder_cache=EncoderCacheConfig(kind='enc-dec'))",
}


def _check_fault(spec: FaultSpec, version: str, roles: set[str], features: set[str]) -> None:
    info = FAULTS[spec.name]
    if version not in info.emulated_versions:
        raise ValueError(
            f"fault {spec.name} cannot be injected on {version}: only {', '.join(info.emulated_versions)}"
        )
    if not roles & set(info.roles):
        raise ValueError(f"fault {spec.name} needs a {' or '.join(info.roles)} worker")
    for need in info.needs:
        if need not in features:
            raise ValueError(f"fault {spec.name} needs {_NEEDS[need]}")
