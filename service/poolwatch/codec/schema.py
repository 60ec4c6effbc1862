"""The snapshot schema's name and version, its errors, and the field-by-field parser.

:func:`parse_snapshot_full` checks every field of a decoded JSON payload and raises
:class:`SnapshotFormatError` naming the first bad one; it accepts any shape the schema allows and
is the reference :mod:`poolwatch.codec.fast` is pinned against.  :mod:`poolwatch.codec.snapshot` puts the
two paths behind ``parse_snapshot``.  Pure and stdlib-only (the probe imports the codec).

Kept whole: one schema's parser, a small checker per field, read top to bottom beside
:func:`~poolwatch.codec.snapshot.dump_snapshot`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from poolwatch import fields
from poolwatch.codec.waiting import parse_holds, parse_progress
from poolwatch.fields import MAX_ITEMS, MAX_NAME, MAX_TEXT, FieldError
from poolwatch.inert import inert
from poolwatch.limits import DEFAULT_LIMITS, Limits
from poolwatch.model.findings import CallSite, CallSiteKind, Frame, Repair, RepairKind, Tripwire, TripwireKind
from poolwatch.model.rank import Exactness, IncidentKind, Phase, Pool, PoolAccount, Role, WorkerId
from poolwatch.model.snapshot import Incident, ProbeHealth, Snapshot
from poolwatch.model.witness import COUNTER_FIGURES, CounterWitness

__all__ = [
    "FIRST_POOLS",
    "MAX_FRAMES",
    "MORE_POOLS_KEY",
    "MAX_LISTED",
    "MAX_QUEUES",
    "RELEASE_KEY",
    "SCHEMA",
    "SCHEMA_VERSION",
    "SnapshotFormatError",
    "SnapshotVersionError",
    "parse_call_site",
    "parse_snapshot_full",
]

SCHEMA = "poolwatch.snapshot"
SCHEMA_VERSION = 1
# a rank's engine release, on the wire under its first name (WorkerId.release in Python): probes
# and sidecars of every version keep reading each other
RELEASE_KEY = "sglang_version"
MAX_QUEUES = DEFAULT_LIMITS.max_queues  # POOLWATCH_MAX_QUEUES
MAX_LISTED = DEFAULT_LIMITS.max_listed  # tripwires, repairs, incidents in one snapshot (POOLWATCH_MAX_LISTED)
MAX_RANK = 65535
MAX_FRAMES = 16  # engine frames in one call site (the probe captures at most 8)
# the pools schema 1 first carried under ``pools``; a pool added since travels under
# MORE_POOLS_KEY, which an older sidecar does not read (it would refuse a pool it does not know)
FIRST_POOLS = frozenset({Pool.FULL, Pool.SWA, Pool.MAMBA, Pool.REQ, Pool.MAMBA_CKPT, Pool.HOST})
MORE_POOLS_KEY = "more_pools"

E = TypeVar("E", bound=enum.Enum)
T = TypeVar("T")


class SnapshotFormatError(FieldError):
    """A snapshot payload does not match the schema; the message names the field."""


class SnapshotVersionError(SnapshotFormatError):
    """A snapshot of a schema version this poolwatch does not speak (probe newer than sidecar?)."""


def parse_snapshot_full(raw: object, limits: Limits = DEFAULT_LIMITS) -> Snapshot:
    """:func:`poolwatch.codec.snapshot.parse_snapshot` field by field, whatever the payload's shape: the
    reference the fast path is pinned against."""
    try:
        return _parse(raw, limits)
    except SnapshotFormatError:
        raise
    except FieldError as exc:
        raise SnapshotFormatError(str(exc)) from None


def _parse(raw: object, limits: Limits) -> Snapshot:
    doc = _mapping(raw, "snapshot")
    if doc.get("schema") != SCHEMA:
        raise SnapshotFormatError(f"schema: expected {SCHEMA!r}, got {doc.get('schema')!r}")
    version = doc.get("version")
    if version != SCHEMA_VERSION:
        raise SnapshotVersionError(f"version: unsupported {version!r}, expected {SCHEMA_VERSION}")
    pools_raw = _mapping(doc.get("pools", {}), "pools", len(Pool))
    pools = {_enum(Pool, k, "pools"): _account(v, f"pools.{k}") for k, v in pools_raw.items()}
    more_raw = doc.get(MORE_POOLS_KEY)
    more = {} if more_raw is None else _mapping(more_raw, MORE_POOLS_KEY, len(Pool))
    pools.update(
        {_enum(Pool, k, MORE_POOLS_KEY): _account(v, f"{MORE_POOLS_KEY}.{k}") for k, v in more.items()}
    )
    strict = doc.get("idle_check_strict")
    progress = doc.get("progress")
    return Snapshot(
        worker=_worker(doc.get("worker"), "worker"),
        seq=_int(doc.get("seq"), "seq"),
        taken_at=_float(doc.get("taken_at"), "taken_at"),
        phase=_enum(Phase, doc.get("phase", "unknown"), "phase"),
        pools=pools,
        source=_str(doc.get("source", "probe"), "source"),
        queues=_queues(doc.get("queues", {}), limits.max_queues),
        tripwires=_tripwires(doc.get("tripwires", []), limits.max_listed),
        incidents=_list(doc.get("incidents", []), "incidents", _incident, limits.max_listed),
        probe=None if doc.get("probe") is None else _probe(doc["probe"], "probe"),
        idle_check_strict=None if strict is None else _bool(strict, "idle_check_strict"),
        boot_id=_str(doc.get("boot_id", ""), "boot_id"),
        repairs=_list(doc.get("repairs", []), "repairs", _repair, limits.max_listed),
        final=_bool(doc.get("final", False), "final"),
        holds=() if doc.get("holds") is None else parse_holds(doc["holds"]),
        progress=None if progress is None else parse_progress(progress),
        witnesses=_list(doc.get("witnesses", []), "witnesses", _witness, limits.max_listed),
    )


def _worker(raw: object, where: str) -> WorkerId:
    d = _mapping(raw, where)
    return WorkerId(
        worker=_str(d.get("worker"), f"{where}.worker"),
        role=_enum(Role, d.get("role", "unified"), f"{where}.role"),
        dp_rank=_rank(d.get("dp_rank", 0), f"{where}.dp_rank"),
        tp_rank=_rank(d.get("tp_rank", 0), f"{where}.tp_rank"),
        pp_rank=_rank(d.get("pp_rank", 0), f"{where}.pp_rank"),
        model=_str(d.get("model", ""), f"{where}.model"),
        release=_str(d.get(RELEASE_KEY, ""), f"{where}.{RELEASE_KEY}"),
        release_verified=_bool(d.get("release_verified", True), f"{where}.release_verified"),
        instance=_str(d.get("instance", ""), f"{where}.instance"),
        engine=_str(d.get("engine", "sglang"), f"{where}.engine"),
    )


_FIGURES = ("size", "available", "evictable", "protected", "held", "session_held", "used")


def _account(raw: object, where: str) -> PoolAccount:
    d = _mapping(raw, where)
    figures = {f: _opt_int(d.get(f), f"{where}.{f}") for f in _FIGURES}
    unreadable = _list(d.get("unreadable", []), f"{where}.unreadable", _str)
    return PoolAccount(
        pool=_enum(Pool, d.get("pool", where.rsplit(".", 1)[-1]), f"{where}.pool"),
        exactness=_enum(Exactness, d.get("exactness", "coarse"), f"{where}.exactness"),
        unreadable=unreadable,
        **figures,
    )


_KINDS = frozenset(k.value for k in TripwireKind)


def _tripwires(raw: object, limit: int) -> tuple[Tripwire, ...]:
    """The tripwires a sidecar of this version can read: a kind a newer probe names and this
    sidecar does not know (a rolling upgrade, the probe first) is skipped, never the whole
    snapshot -- its pools, and so its gap, still come through."""
    found = _list(raw, "tripwires", _known_tripwire, limit)
    return tuple(t for t in found if t is not None)


def _known_tripwire(raw: object, where: str) -> Tripwire | None:
    kind = _mapping(raw, where).get("kind")
    if isinstance(kind, str) and kind not in _KINDS and kind.isidentifier():
        return None
    return _tripwire(raw, where)


def _tripwire(raw: object, where: str) -> Tripwire:
    d = _mapping(raw, where)
    return Tripwire(
        kind=_enum(TripwireKind, d.get("kind"), f"{where}.kind"),
        pool=_enum(Pool, d.get("pool"), f"{where}.pool"),
        slots=_list(d.get("slots", []), f"{where}.slots", _int),
        first_seen_hook=_str(d.get("first_seen_hook", ""), f"{where}.first_seen_hook"),
        seq=_int(d.get("seq", 0), f"{where}.seq"),
        requests=_list(d.get("requests", []), f"{where}.requests", _str),
        page_size=max(1, _int(d.get("page_size", 1), f"{where}.page_size")),
        total=_int(d.get("total", 0), f"{where}.total"),
        call_site=_opt_call_site(d.get("call_site"), f"{where}.call_site"),
    )


def _repair(raw: object, where: str) -> Repair:
    d = _mapping(raw, where)
    return Repair(
        kind=_enum(RepairKind, d.get("kind"), f"{where}.kind"),
        pool=_enum(Pool, d.get("pool"), f"{where}.pool"),
        count=_int(d.get("count", 0), f"{where}.count"),
        slots=_list(d.get("slots", []), f"{where}.slots", _int),
        hook=_str(d.get("hook", ""), f"{where}.hook"),
        seq=_int(d.get("seq", 0), f"{where}.seq"),
        requests=_list(d.get("requests", []), f"{where}.requests", _str),
        page_size=max(1, _int(d.get("page_size", 1), f"{where}.page_size")),
        call_site=_opt_call_site(d.get("call_site"), f"{where}.call_site"),
    )


def _witness(raw: object, where: str) -> CounterWitness:
    d = _mapping(raw, where)
    figure = _str(d.get("figure"), f"{where}.figure")
    if figure not in COUNTER_FIGURES:
        raise SnapshotFormatError(
            f"{where}.figure: expected one of {', '.join(COUNTER_FIGURES)}, got {figure!r}"
        )
    return CounterWitness(
        pool=_enum(Pool, d.get("pool"), f"{where}.pool"),
        figure=figure,
        counter=_str(d.get("counter", ""), f"{where}.counter"),
        reported=fields.integer(d.get("reported"), f"{where}.reported"),  # a counter may be below zero
        census=_int(d.get("census"), f"{where}.census"),
        seq=_int(d.get("seq", 0), f"{where}.seq"),
        since_seq=_int(d.get("since_seq", 0), f"{where}.since_seq"),
        since=_float(d.get("since", 0.0), f"{where}.since"),
    )


def _opt_call_site(raw: object, where: str) -> CallSite | None:
    """A finding's engine call site; absent (every snapshot before it existed) or null: none."""
    return None if raw is None else parse_call_site(raw, where)


def parse_call_site(raw: object, where: str) -> CallSite:
    """A call site as :func:`~poolwatch.codec.snapshot.dump_call_site` writes it."""
    d = _mapping(raw, where)
    return CallSite(
        kind=_enum(CallSiteKind, d.get("kind"), f"{where}.kind"),
        frames=_list(d.get("frames", []), f"{where}.frames", _frame, MAX_FRAMES),
        seq=_int(d.get("seq", 0), f"{where}.seq"),
    )


def _frame(raw: object, where: str) -> Frame:
    d = _mapping(raw, where)
    return Frame(
        file=_str(d.get("file", ""), f"{where}.file"),
        line=_int(d.get("line", 0), f"{where}.line"),
        function=_str(d.get("function", ""), f"{where}.function"),
    )


def _incident(raw: object, where: str) -> Incident:
    d = _mapping(raw, where)
    return Incident(
        kind=_enum(IncidentKind, d.get("kind"), f"{where}.kind"),
        message=_text(d.get("message", ""), f"{where}.message"),
        at=_float(d.get("at", 0.0), f"{where}.at"),
        pools=_list(d.get("pools", []), f"{where}.pools", _account),
    )


def _probe(raw: object, where: str) -> ProbeHealth:
    d = _mapping(raw, where)
    return ProbeHealth(
        samples_total=_int(d.get("samples_total", 0), f"{where}.samples_total"),
        errors_total=_int(d.get("errors_total", 0), f"{where}.errors_total"),
        last_error=_text(d.get("last_error", ""), f"{where}.last_error"),
        sample_cost_seconds=_float(d.get("sample_cost_seconds", 0.0), f"{where}.sample_cost_seconds"),
        census_cost_seconds=_float(d.get("census_cost_seconds", 0.0), f"{where}.census_cost_seconds"),
        census_total=_int(d.get("census_total", 0), f"{where}.census_total"),
        disabled=_bool(d.get("disabled", False), f"{where}.disabled"),
        tripwires_dropped=_int(d.get("tripwires_dropped", 0), f"{where}.tripwires_dropped"),
        guard=_bool(d.get("guard", False), f"{where}.guard"),
        guard_return=_bool(d.get("guard_return", False), f"{where}.guard_return"),
    )


def _queues(raw: object, limit: int) -> dict[str, int]:
    d = _mapping(raw, "queues", limit)
    return {_str(k, "queues"): _int(v, f"queues.{k}") for k, v in d.items()}


def _mapping(raw: object, where: str, limit: int = MAX_ITEMS) -> Mapping[str, Any]:
    return fields.mapping(raw, where, limit)


def _list(raw: object, where: str, item: Callable[[Any, str], T], limit: int = MAX_ITEMS) -> tuple[T, ...]:
    return fields.items(raw, where, item, limit)


def _enum(kind: type[E], raw: object, where: str) -> E:
    return fields.enumerated(kind, raw, where)


def _int(raw: object, where: str) -> int:
    """Counters, sequence numbers, slot ids: never negative, never beyond 2**53."""
    return fields.count(raw, where)


def _opt_int(raw: object, where: str) -> int | None:
    """A pool figure: a negative one is impossible, so a schema error (not a double free)."""
    return fields.opt_count(raw, where)


def _rank(raw: object, where: str) -> int:
    return fields.integer(raw, where, 0, MAX_RANK)


def _float(raw: object, where: str) -> float:
    return fields.number(raw, where)


def _str(raw: object, where: str) -> str:
    return inert(fields.text(raw, where, MAX_NAME))


def _text(raw: object, where: str) -> str:
    return inert(fields.text(raw, where, MAX_TEXT))


def _bool(raw: object, where: str) -> bool:
    return fields.boolean(raw, where)
