"""A snapshot of the common shape, validated and built in one pass: the codec's fast path.

Nearly every probe answer has one shape: a JSON object of plain ``str``/``int``/``float``/``bool``
values, a few pools, a few queues, and no tripwire, repair or incident listed.  A central
sidecar decodes a thousand such answers a second when the figures move with every decode step,
and the field-by-field parser (:func:`poolwatch.codec.schema.parse_snapshot_full`) spent most of its
time in layers of small calls.  :func:`common_snapshot` checks that shape with one exact type
test (``type(v) is int``) and one range comparison per value, a few checks per group of fields,
and builds each value once.

It never rejects anything: whatever it is not sure of -- a value of another type, out of range, too
long, not encodable, not inert (:mod:`poolwatch.inert`), a field missing where the schema has no
default, an ``int`` subclass, a non-empty tripwire, repair, incident or counter-witness list --
makes it answer ``None``, and the full parser runs and accepts the payload or names its first bad
field as before.  So this module decides only *how fast* a valid snapshot is built, never *whether*
a payload is accepted or why it is refused (``tests/core/test_codec_fast.py`` pins that on
probe-produced, generated and mutated payloads).  Pure and stdlib-only (the probe imports the codec).
"""

from __future__ import annotations

from typing import Any, TypeGuard

from poolwatch.codec.schema import MORE_POOLS_KEY, RELEASE_KEY
from poolwatch.codec.waiting import fast_progress
from poolwatch.fields import MAX_INT, MAX_ITEMS, MAX_NAME, MAX_NUMBER, MAX_TEXT
from poolwatch.inert import is_inert
from poolwatch.limits import Limits
from poolwatch.model.rank import Exactness, Phase, Pool, PoolAccount, Role, WorkerId
from poolwatch.model.snapshot import ProbeHealth, Snapshot

__all__ = ["common_snapshot"]

MAX_RANK = 65535
_POOLS = {p.value: p for p in Pool}
_PHASES = {p.value: p for p in Phase}
_ROLES = {r.value: r for r in Role}
_EXACTNESS = {e.value: e for e in Exactness}
_PROBE_COUNTS = ("samples_total", "errors_total", "census_total", "tripwires_dropped")


def common_snapshot(doc: object, limits: Limits, schema: str, version: int) -> Snapshot | None:
    """``doc`` as a snapshot when it has the common shape and every value is valid, else ``None``
    (then only the full parser may say whether, and why, it is refused)."""
    if not _common_header(doc, schema, version):
        return None
    g = doc.get
    scalars = _scalars(doc)
    worker, pools, queues = _worker(g("worker")), _pools(g("pools", {})), _queues(g("queues", {}), limits)
    more_raw = g(MORE_POOLS_KEY)  # the pools added since schema 1, under a key of their own
    more = {} if more_raw is None else _pools(more_raw)
    if pools is not None and more is not None:
        pools.update(more)
    probe_raw, progress_raw = g("probe"), g("progress")
    probe = None if probe_raw is None else _probe(probe_raw)
    progress = None if progress_raw is None else fast_progress(progress_raw)
    if scalars is None or worker is None or pools is None or queues is None or more is None:
        return None
    if (probe is None and probe_raw is not None) or (progress is None and progress_raw is not None):
        return None
    seq, taken_at, phase, source, strict, boot_id, final = scalars
    return Snapshot(
        worker,
        seq,
        taken_at,
        phase,
        pools,
        source,
        queues,
        (),
        (),
        probe,
        strict,
        boot_id,
        (),
        final,
        (),
        progress,
    )


def _common_header(doc: object, schema: str, version: int) -> TypeGuard[dict[str, Any]]:
    """A JSON object of this schema and version listing no tripwire, incident, repair, hold or counter
    witness."""
    if type(doc) is not dict or len(doc) > MAX_ITEMS:
        return False
    g = doc.get
    if g("schema") != schema or type(g("version")) is not int or g("version") != version:
        return False
    listed = (g("tripwires", []), g("incidents", []), g("repairs", []), g("witnesses", []), g("holds", []))
    return all(map(_empty, listed))


def _scalars(doc: dict[str, Any]) -> tuple[int, float, Phase, str, bool | None, str, bool] | None:
    """``seq, taken_at, phase, source, idle_check_strict, boot_id, final``, each valid, or ``None``."""
    g = doc.get
    seq, taken_at, strict, final = g("seq"), _number(g("taken_at")), g("idle_check_strict"), g("final", False)
    source, boot_id, phase = g("source", "probe"), g("boot_id", ""), g("phase", "unknown")
    phase_ = _PHASES.get(phase) if type(phase) is str else None
    if type(seq) is not int or not 0 <= seq <= MAX_INT or taken_at is None or type(final) is not bool:
        return None
    if (strict is not None and type(strict) is not bool) or not _texts((source, boot_id), MAX_NAME):
        return None
    return None if phase_ is None else (seq, taken_at, phase_, source, strict, boot_id, final)


def _empty(raw: object) -> bool:
    return type(raw) is list and not raw


def _texts(values: tuple[Any, ...] | list[Any], limit: int) -> bool:
    """Every value a ``str`` of at most ``limit`` characters that UTF-8 can encode, and inert
    (a control character: the full parser makes it so)."""
    for v in values:
        if type(v) is not str or len(v) > limit or not is_inert(v):
            return False
        if not v.isascii():
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return False
    return True


def _counts(values: tuple[Any, ...], high: int, optional: bool = False) -> bool:
    """Every value an ``int`` (not a bool) in ``0 .. high`` (or ``None`` when ``optional``)."""
    for v in values:
        if (type(v) is not int or not 0 <= v <= high) and not (optional and v is None):
            return False
    return True


def _number(raw: object) -> float | None:
    """A finite number within ``MAX_NUMBER`` as a float (what ``fields.number`` returns)."""
    if type(raw) is float:
        return raw if -MAX_NUMBER <= raw <= MAX_NUMBER else None  # NaN and infinities fail this too
    if type(raw) is int and -MAX_NUMBER <= raw <= MAX_NUMBER:
        return float(raw)
    return None


def _worker(raw: object) -> WorkerId | None:
    if type(raw) is not dict or len(raw) > MAX_ITEMS:
        return None
    g = raw.get
    name: Any = g("worker")
    model, release, instance = g("model", ""), g(RELEASE_KEY, ""), g("instance", "")
    engine, verified = g("engine", "sglang"), g("release_verified", True)
    ranks = (g("dp_rank", 0), g("tp_rank", 0), g("pp_rank", 0))
    role = g("role", "unified")
    role_ = _ROLES.get(role) if type(role) is str else None
    if (
        role_ is None
        or not _counts(ranks, MAX_RANK)
        or not _texts((name, model, release, instance, engine), MAX_NAME)
        or type(verified) is not bool
    ):
        return None
    return WorkerId(
        name, role_, ranks[0], ranks[1], ranks[2], model, release, instance, verified, engine=engine
    )


def _pools(raw: object) -> dict[Pool, PoolAccount] | None:
    if type(raw) is not dict or len(raw) > len(Pool):
        return None
    pools = {}
    for key, value in raw.items():
        pool = _POOLS.get(key)
        account = None if pool is None else _account(value, key)
        if account is None or pool is None:
            return None
        pools[pool] = account
    return pools


def _account(raw: object, key: str) -> PoolAccount | None:
    if type(raw) is not dict or len(raw) > MAX_ITEMS:
        return None
    g = raw.get
    size, available, evictable, protected, held, session_held, used = figures = (
        g("size"), g("available"), g("evictable"), g("protected"), g("held"), g("session_held"), g("used")
    )  # fmt: skip
    unreadable, pool, exactness = g("unreadable", []), g("pool", key), g("exactness", "coarse")
    pool_ = _POOLS.get(pool) if type(pool) is str else None
    exact = _EXACTNESS.get(exactness) if type(exactness) is str else None
    if pool_ is None or exact is None or not _counts(figures, MAX_INT, optional=True):
        return None
    if type(unreadable) is not list or len(unreadable) > MAX_ITEMS or not _texts(unreadable, MAX_NAME):
        return None
    return PoolAccount(
        pool_, size, available, evictable, protected, held, session_held, used, exact, tuple(unreadable)
    )


def _queues(raw: object, limits: Limits) -> dict[str, int] | None:
    if type(raw) is not dict or len(raw) > limits.max_queues:
        return None
    if not _texts(tuple(raw), MAX_NAME) or not _counts(tuple(raw.values()), MAX_INT):
        return None
    return dict(raw)


def _probe(raw: object) -> ProbeHealth | None:
    if type(raw) is not dict or len(raw) > MAX_ITEMS:
        return None
    g = raw.get
    counts = tuple(g(f, 0) for f in _PROBE_COUNTS)
    sample, census = _number(g("sample_cost_seconds", 0.0)), _number(g("census_cost_seconds", 0.0))
    last_error, disabled, guard = g("last_error", ""), g("disabled", False), g("guard", False)
    guard_return = g("guard_return", False)
    if sample is None or census is None or type(disabled) is not bool or type(guard) is not bool:
        return None
    if type(guard_return) is not bool:
        return None
    if not _counts(counts, MAX_INT) or not _texts((last_error,), MAX_TEXT):
        return None
    return ProbeHealth(
        samples_total=counts[0],
        errors_total=counts[1],
        last_error=last_error,
        sample_cost_seconds=sample,
        census_cost_seconds=census,
        census_total=counts[2],
        disabled=disabled,
        tripwires_dropped=counts[3],
        guard=guard,
        guard_return=guard_return,
    )
