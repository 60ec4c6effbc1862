"""The probe's settings, from ``POOLWATCH_PROBE_*`` environment variables (one frozen object).

=====================================  =========  ==============================================
variable                               default    meaning
=====================================  =========  ==============================================
``POOLWATCH_PROBE``                    unset      ``1``: consent (the ``.pth`` activation, each plugin)
``POOLWATCH_PROBE_DISABLE``            unset      ``1``: the kill switch; nothing is installed
``POOLWATCH_PROBE_DIR``                see below  discovery files, the secret and the ``DISABLE`` file
``POOLWATCH_PROBE_PORT_BASE``          unset      bind ``base + local rank`` instead of port 0
``POOLWATCH_PROBE_SERVE``              1          ``0``: take snapshots but serve nothing
``POOLWATCH_PROBE_SAMPLE_INTERVAL``    0.1        seconds between cheap samples (0.01 to 60)
``POOLWATCH_PROBE_SAMPLE_BUDGET``      0.0005     the most of the scheduler thread the busy samples
                                                  take: the interval stretches (up to 4 s) when a
                                                  sample costs more (0 = off, 0 to 0.05;
                                                  ``poolwatch.probe.core.pacing``)
``POOLWATCH_PROBE_CENSUS_INTERVAL``    10         seconds between Mamba censuses while busy (1 to 86400)
``POOLWATCH_PROBE_KV_CENSUS_INTERVAL`` 300        seconds between full-KV censuses while busy (1 to 86400)
``POOLWATCH_PROBE_CHUNK_TRIPWIRE``     1          ``0``: skip the check after each prefill chunk
``POOLWATCH_PROBE_MAX_ERRORS``         10         consecutive failed samples before giving up
``POOLWATCH_PROBE_GUARD``              0          ``1``: refuse wrong frees, repair free lists on exact proof
``POOLWATCH_PROBE_LAST_WORD_WAIT``     0.3        seconds a rank whose idle check will raise waits for the
                                                  sidecar to collect its final snapshot (0 = off, 0 to 5)
``POOLWATCH_ENGINE_VERSION``           installed  read the scheduler as this release of its engine
                                                  (formerly ``POOLWATCH_SGLANG_VERSION`` /
                                                  ``POOLWATCH_VLLM_VERSION``: still read, each for its
                                                  own engine only, with a deprecation log line)
``POOLWATCH_WORKER``                   hostname   the worker name (else ``POD_NAME``, else the host name)
=====================================  =========  ==============================================

The directory defaults to ``/run/poolwatch`` when this user may write there, else
``$XDG_RUNTIME_DIR/poolwatch``, else ``/tmp/poolwatch``
(:func:`poolwatch.discovery.safety.default_directory`); whichever it is, it is adopted only when
this user or root owns it and no one else may write it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from poolwatch.discovery.safety import default_directory
from poolwatch.probe.core.last_word import GRACE_S

__all__ = ["DEFAULT_DIR", "ProbeConfig", "ProbeConfigError", "armed_config"]

DEFAULT_DIR = "/tmp/poolwatch"  # the last resort of default_directory (no /run, no XDG_RUNTIME_DIR)
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
SAMPLE_RANGE = (0.01, 60.0)  # seconds: below, the probe costs the scheduler; above, it never watches
CENSUS_RANGE = (1.0, 86_400.0)
BUDGET_RANGE = (0.0, 0.05)  # a share of the scheduler thread (0: no pacing)
LAST_WORD_RANGE = (0.0, 5.0)  # seconds: a crash already certain is delayed at most this (core/last_word.py)


class ProbeConfigError(ValueError):
    """A ``POOLWATCH_PROBE_*`` variable has a bad value; the message names it."""


@dataclass(frozen=True, slots=True)
class ProbeConfig:
    sample_interval_s: float = 0.1
    sample_budget: float = 0.0005  # the busy samples' share of the scheduler thread (core/pacing.py)
    census_interval_s: float = 10.0
    kv_census_interval_s: float = 300.0
    idle_kv_census_gap_s: float = 30.0  # at idle the KV census runs at most this often
    chunk_tripwire: bool = True
    guard: bool = False  # opt-in: refuse wrong frees, repair free lists; off with any kill switch
    last_word_wait_s: float = 0.3  # 0: a doomed rank never waits for its sidecar (core/last_word.py)
    last_word_grace_s: float = GRACE_S  # after the hand-over, for the page's way on (within the bound)
    directory: str = field(default_factory=lambda: default_directory({}))
    port_base: int | None = None
    serve: bool = True
    disabled: bool = False
    max_consecutive_errors: int = 10
    release: str = ""  # "" = the installed engine's release (POOLWATCH_ENGINE_VERSION)
    worker: str = ""  # "" = POOLWATCH_WORKER, POD_NAME or the host name (poolwatch.naming)

    deprecated: tuple[str, ...] = ()  # deprecated variables these settings were read from (logged once)

    @classmethod
    def from_env(cls, environ: Mapping[str, str], *, release_env: str = "") -> ProbeConfig:
        """Settings from the environment; :class:`ProbeConfigError` names the first bad variable.
        ``release_env``: the engine's former release variable, read when ``POOLWATCH_ENGINE_VERSION``
        is not set (and named in :attr:`deprecated`)."""
        release, deprecated = _release(environ, release_env)
        return cls(
            sample_interval_s=_seconds(environ, "POOLWATCH_PROBE_SAMPLE_INTERVAL", 0.1, SAMPLE_RANGE),
            sample_budget=_share(environ, "POOLWATCH_PROBE_SAMPLE_BUDGET", 0.0005, BUDGET_RANGE),
            census_interval_s=_seconds(environ, "POOLWATCH_PROBE_CENSUS_INTERVAL", 10.0, CENSUS_RANGE),
            kv_census_interval_s=_seconds(environ, "POOLWATCH_PROBE_KV_CENSUS_INTERVAL", 300.0, CENSUS_RANGE),
            chunk_tripwire=_flag(environ, "POOLWATCH_PROBE_CHUNK_TRIPWIRE", True),
            guard=_flag(environ, "POOLWATCH_PROBE_GUARD", False),
            last_word_wait_s=_seconds(environ, "POOLWATCH_PROBE_LAST_WORD_WAIT", 0.3, LAST_WORD_RANGE),
            last_word_grace_s=_seconds(environ, "POOLWATCH_PROBE_LAST_WORD_GRACE", GRACE_S, LAST_WORD_RANGE),
            directory=environ.get("POOLWATCH_PROBE_DIR") or default_directory(environ),
            port_base=_port(environ, "POOLWATCH_PROBE_PORT_BASE"),
            serve=_flag(environ, "POOLWATCH_PROBE_SERVE", True),
            disabled=_flag(environ, "POOLWATCH_PROBE_DISABLE", False),
            max_consecutive_errors=_count(environ, "POOLWATCH_PROBE_MAX_ERRORS", 10),
            release=release,
            worker=_name(environ, "POOLWATCH_WORKER"),
            deprecated=deprecated,
        )


def armed_config(environ: Mapping[str, str], *, release_env: str = "") -> ProbeConfig | None:
    """The settings an engine's activation installs the probe with; None (nothing installed) when
    the kill switch is set or a variable is bad (logged once, naming it).  A deprecated variable
    that was read is logged once too."""
    log = logging.getLogger("poolwatch.probe")
    try:
        config = ProbeConfig.from_env(environ, release_env=release_env)
    except ProbeConfigError as exc:
        log.error("poolwatch probe not installed: %s", exc)
        return None
    for name in config.deprecated:
        log.warning("poolwatch probe: %s is deprecated; set POOLWATCH_ENGINE_VERSION instead", name)
    return None if config.disabled else config


def _release(environ: Mapping[str, str], release_env: str) -> tuple[str, tuple[str, ...]]:
    """The release override and the deprecated variable it came from, if any."""
    value = _name(environ, "POOLWATCH_ENGINE_VERSION").strip()
    if value or not release_env:
        return value, ()
    legacy = _name(environ, release_env).strip()
    return legacy, (release_env,) if legacy else ()


def _flag(environ: Mapping[str, str], name: str, default: bool) -> bool:
    """``1/true/yes/on`` or ``0/false/no/off``; unset or empty is the default (never a quiet "off")."""
    raw = environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ProbeConfigError(f"{name}: expected 1 or 0, got {raw!r}")


def _seconds(environ: Mapping[str, str], name: str, default: float, bounds: tuple[float, float]) -> float:
    return _number(environ, name, default, bounds, noun="seconds", unit=" seconds")


def _share(environ: Mapping[str, str], name: str, default: float, bounds: tuple[float, float]) -> float:
    return _number(environ, name, default, bounds, noun="a share such as 0.001", unit=" (a share)")


def _number(
    environ: Mapping[str, str],
    name: str,
    default: float,
    bounds: tuple[float, float],
    *,
    noun: str,
    unit: str,
) -> float:
    """A finite number within ``bounds``; unset or empty is the default."""
    raw = environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ProbeConfigError(f"{name}: expected {noun}, got {raw[:40]!r}") from None
    low, high = bounds
    if not math.isfinite(value) or not low <= value <= high:
        raise ProbeConfigError(f"{name}: expected {low:g} to {high:g}{unit}, got {raw[:40]!r}")
    return value


def _name(environ: Mapping[str, str], name: str) -> str:
    raw = environ.get(name, "")
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:
        raise ProbeConfigError(f"{name}: not valid UTF-8 text") from None
    if len(raw) > 256:
        raise ProbeConfigError(f"{name}: longer than 256 characters")
    return raw


def _count(environ: Mapping[str, str], name: str, default: int) -> int:
    raw = environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    if not raw.strip().isdigit() or len(raw.strip()) > 6 or int(raw) < 1:
        raise ProbeConfigError(f"{name}: expected a whole number 1 to 999999, got {raw[:40]!r}")
    return int(raw)


def _port(environ: Mapping[str, str], name: str) -> int | None:
    raw = environ.get(name)
    if raw is None or raw.strip() == "":
        return None
    if not raw.strip().isdigit() or len(raw.strip()) > 5 or not 1 <= int(raw) <= 65535:
        raise ProbeConfigError(f"{name}: expected a TCP port 1-65535, got {raw[:40]!r}")
    return int(raw)
