"""The long-poll's "nothing changed" answer: the probe <-> sidecar contract (stdlib + vocabulary).

A watched probe answers about once per scrape interval even when nothing happened, and most of
what a sidecar spent on such an answer was decoding a body it already had.  So the snapshot is
split in two:

* its *clock* -- ``seq``, ``taken_at`` and the probe's own per-sample counters and costs
  (:data:`PROBE_CLOCK`), which change with every sample;
* its *content* -- everything else: the pools' figures, phase, queues, tripwires, repairs,
  errors, ...; what the sidecar exports and judges besides the clock.

The probe labels every snapshot answer with ``ETag: "<tag>"``, a digest of the content
(:func:`content_tag`).  A sidecar holding the snapshot of that tag sends it back as
``?have=<tag>``; when the latest snapshot's content is the same, the probe answers ``304`` with
no body and the clock in one header (:func:`clock_header`, ``Poolwatch-Clock: seq=... taken_at=...``),
and the sidecar renews the snapshot it holds with that clock (:func:`renew`): the very snapshot
a full answer would have decoded to, and what was derived from its figures comes along.

Compatibility both ways: an old probe ignores ``have`` and sends no ETag, so the new sidecar
never asks and gets full answers as before; an old sidecar never sends ``have`` (and ignores
the ETag), so a new probe never answers it with a 304.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import Any

from poolwatch import fields
from poolwatch.conservation import share_findings
from poolwatch.model.snapshot import Snapshot

__all__ = ["CLOCK_HEADER", "HAVE", "NOT_MODIFIED", "PROBE_CLOCK", "clock_header", "content_tag", "renew"]

HAVE = "have"  # the query parameter naming the content the client holds
CLOCK_HEADER = "Poolwatch-Clock"
NOT_MODIFIED = 304
PROBE_CLOCK = ("samples_total", "census_total", "sample_cost_seconds", "census_cost_seconds")
_INTS = frozenset({"seq", "samples_total", "census_total"})
_FIELDS = ("seq", "taken_at", *PROBE_CLOCK)
MAX_HEADER = 512


def content_tag(doc: dict[str, Any]) -> str:
    """The digest of a dumped snapshot's content (``doc`` is
    :func:`~poolwatch.codec.snapshot.dump_snapshot`'s, left as it is): two snapshots with the same
    tag differ at most in their clock."""
    content = {k: v for k, v in doc.items() if k not in ("seq", "taken_at")}
    if isinstance(doc.get("probe"), dict):
        content["probe"] = {k: v for k, v in doc["probe"].items() if k not in PROBE_CLOCK}
    digest = hashlib.blake2b(json.dumps(content).encode(), digest_size=16)
    return digest.hexdigest()


def clock_header(snap: Snapshot) -> str:
    """The clock of ``snap`` as one header value: ``seq=48211 taken_at=1761907200.25 ...``."""
    values: dict[str, object] = {"seq": snap.seq, "taken_at": snap.taken_at}
    if snap.probe is not None:
        values.update((name, getattr(snap.probe, name)) for name in PROBE_CLOCK)
    return " ".join(f"{k}={v!r}" for k, v in values.items())


def renew(snap: Snapshot, header: str) -> Snapshot:
    """``snap`` at the later sample that ``header`` (:func:`clock_header`) describes; its findings
    are shared, not assessed again.  Raises ``ValueError`` for a header that is not such a clock."""
    if len(header) > MAX_HEADER:
        raise ValueError(f"{CLOCK_HEADER} longer than {MAX_HEADER} characters")
    clock = dict(part.partition("=")[::2] for part in header.split())
    if "seq" not in clock or "taken_at" not in clock or not set(clock) <= set(_FIELDS):
        raise ValueError(f"{CLOCK_HEADER} {header[:100]!r} is not seq=... taken_at=... [probe counters]")
    values = {k: _number(k, v) for k, v in clock.items()}
    probe = snap.probe
    if probe is not None:
        probe = replace(probe, **{k: values[k] for k in PROBE_CLOCK if k in values})
    new = replace(snap, seq=values["seq"], taken_at=values["taken_at"], probe=probe)
    share_findings(snap, new)
    return new


def _number(name: str, text: str) -> Any:
    """One clock field, through the very checks a snapshot's field passes (:mod:`poolwatch.fields`:
    a count within ``0..2**53``, a time or cost within ``0..1e15``); raises ``ValueError`` with a
    bounded message, never an ``OverflowError`` (``seq=10**400``) or a huge echo."""
    try:
        raw: object = int(text) if name in _INTS else float(text)
    except ValueError:
        raw = text[:40]
    where = f"{CLOCK_HEADER} {name}"
    if name in _INTS:
        return fields.count(raw, where)
    return fields.number(raw, where, 0.0, fields.MAX_NUMBER)
