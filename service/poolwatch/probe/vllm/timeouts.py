"""vLLM's own bounds on a KV transfer, read once from its configuration (EngineCore thread; never raises).

A finished request kept for a transfer, or a request waiting for remote KV, is freed by vLLM's own
backstop once the connector's bound passes -- when the connector has one, and when the engine steps
to notice.  The probe reads that bound so a hold is stranded only past it (the sidecar adds its grace):

=====================  ==========================================  =========================================
connector, releases    ``kv_send`` (a prefill keeps the blocks)    ``kv_recv`` (a decode waits for them)
=====================  ==========================================  =========================================
NIXL, up to 0.21       ``VLLM_NIXL_ABORT_REQUEST_TIMEOUT`` (480 s)  the same
NIXL, 0.22 and later   ``kv_lease_duration`` (30 s; on a decode,    ``decoder_kv_blocks_ttl`` (480 s)
                       ``decoder_kv_blocks_ttl``)
Mooncake               ``kv_lease_duration``, else                 the same
                       ``VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT`` (480 s)
any other              none                                        none
=====================  ==========================================  =========================================

Values are taken from the connector's scheduler-side object where it keeps them (the very numbers it
uses: ``_kv_lease_duration``, ``decoder_kv_blocks_ttl``), else from ``kv_connector_extra_config``, else
from the rank's environment with vLLM's default; a MultiConnector's children are read in turn.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from poolwatch.model.holds import HoldReason

__all__ = ["connector_timeouts"]

Bound = tuple[float, str]  # seconds, and where it was read


def _connectors(sched: Any) -> Iterator[Any]:
    """The scheduler's connector and, for a MultiConnector, its children (at most one level)."""
    top = getattr(sched, "connector", None)
    if top is None:
        return
    yield top
    yield from getattr(top, "_connectors", None) or ()


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        return None
    return float(value)


def _extra(sched: Any, key: str) -> float | None:
    config = getattr(getattr(sched, "vllm_config", None), "kv_transfer_config", None)
    extra = getattr(config, "kv_connector_extra_config", None)
    return _number(extra.get(key)) if isinstance(extra, Mapping) else None


def _env(environ: Mapping[str, str], name: str, default: float) -> Bound:
    raw = environ.get(name, "")
    try:
        value = _number(float(raw)) if raw else None
    except ValueError:
        value = None
    return (value if value is not None else default), name


def _consumer(sched: Any) -> bool:
    config = getattr(getattr(sched, "vllm_config", None), "kv_transfer_config", None)
    return getattr(config, "kv_role", None) == "kv_consumer"


def _nixl(sched: Any, side: Any, environ: Mapping[str, str]) -> dict[HoldReason, Bound]:
    lease = _number(getattr(side, "_kv_lease_duration", None))
    ttl = _number(getattr(side, "decoder_kv_blocks_ttl", None))
    if lease is None and ttl is None:  # up to 0.21: one timeout, from the environment
        bound = _env(environ, "VLLM_NIXL_ABORT_REQUEST_TIMEOUT", 480.0)
        return {HoldReason.KV_SEND: bound, HoldReason.KV_RECV: bound}
    ttl_bound: Bound = (ttl or _extra(sched, "decoder_kv_blocks_ttl") or 480.0, "decoder_kv_blocks_ttl")
    lease_bound: Bound = (lease or _extra(sched, "kv_lease_duration") or 30.0, "kv_lease_duration")
    send = ttl_bound if _consumer(sched) else lease_bound
    return {HoldReason.KV_SEND: send, HoldReason.KV_RECV: ttl_bound}


def _mooncake(sched: Any, side: Any, environ: Mapping[str, str]) -> dict[HoldReason, Bound]:
    lease = _number(getattr(side, "_kv_lease_duration", None)) or _extra(sched, "kv_lease_duration")
    bound = (
        (lease, "kv_lease_duration") if lease else _env(environ, "VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT", 480.0)
    )
    return {HoldReason.KV_SEND: bound, HoldReason.KV_RECV: bound}


def connector_timeouts(sched: Any, environ: Mapping[str, str]) -> dict[HoldReason, Bound]:
    """The rank's bounds on each kind of transfer wait ({} without a connector that has any)."""
    out: dict[HoldReason, Bound] = {}
    try:
        for connector in _connectors(sched):
            name = type(connector).__name__
            side = getattr(connector, "connector_scheduler", None)
            if name.startswith("Nixl"):
                found = _nixl(sched, side, environ)
            elif name.startswith("Mooncake"):
                found = _mooncake(sched, side, environ)
            else:
                continue
            for reason, bound in found.items():  # several children: the longest bound holds
                if reason not in out or bound[0] > out[reason][0]:
                    out[reason] = bound
    except Exception:  # a connector's shape the probe does not know: no bound, never an error
        return {}
    return out
