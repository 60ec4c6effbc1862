"""What the alert state file may hold: exactly what its reader accepts, so a restart can always
restore it.  Pure.

The reader (:mod:`poolwatch.sidecar.persist`) refuses a whole file for one text over
:data:`MAX_TEXT` characters, one alert with more than :data:`MAX_ENTRIES` labels or annotations, or
a file over :data:`MAX_STATE_BYTES`; a refused file restores nothing, so every firing alert and
every notice a receiver was owed would be lost at the next restart.  So the writer never writes
what the reader refuses (bounded by construction), and says in the file what it left out:

* a label or annotation value past :data:`MAX_TEXT` characters is cut, the text saying so
  (:func:`poolwatch.fields.cut`); a name past :data:`MAX_NAME` likewise; past
  :data:`MAX_ENTRIES` labels, annotations, receivers told or receivers owed, the rest are left out;
* when the whole document would pass :data:`MAX_STATE_BYTES`, each entry gets an equal share of
  it and the annotations of an entry over its share are cut further (never below
  :data:`MIN_TEXT` characters each); should that not do, entries are left out, least worth
  keeping first: owed ``resolved`` notices, oldest first, then firing alerts, ``info`` before
  ``warning`` before ``critical``, the most recently fired first;
* what was cut is counted in the document's ``cut`` object (``texts``, ``entries``, ``alerts``,
  ``notices``), logged at save and at load.

In practice one alert is a few hundred bytes to 5 KB, so the file holds thousands of firing
alerts before anything is left out; ``tests/sidecar/test_state_bounded.py`` writes the largest
texts a probe can make and reads every alert back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from poolwatch import fields

__all__ = [
    "MAX_ALERTS",
    "MAX_ENTRIES",
    "MAX_NAME",
    "MAX_STATE_BYTES",
    "MAX_TEXT",
    "MIN_TEXT",
    "Cut",
    "dumps",
    "fit_document",
    "fit_strings",
]

MAX_STATE_BYTES = 4 << 20  # the whole file
MAX_ALERTS = 10_000  # firing alerts; owed notices per receiver
MAX_ENTRIES = 64  # labels, annotations of one alert; receivers told; receivers owed
MAX_TEXT = fields.MAX_TEXT  # one label or annotation value, a subject
MAX_NAME = fields.MAX_NAME  # a label or annotation name, a receiver's name, an alert's name
MIN_TEXT = 256  # an annotation is never cut shorter than this to share the file's bytes
HEADER = 32 << 10  # bytes kept for the version, the ``cut`` note, receivers' names, brackets
_SEVERITY_WORTH = {"critical": 0, "warning": 1, "info": 2}


@dataclass(slots=True)
class Cut:
    """What a save left out or shortened (all zero: the file holds everything whole)."""

    texts: int = 0  # labels, annotations or names shortened
    entries: int = 0  # labels, annotations, receivers told or owed left out
    alerts: int = 0  # firing alerts left out
    notices: int = 0  # owed resolved notices left out

    def __bool__(self) -> bool:
        return any((self.texts, self.entries, self.alerts, self.notices))

    def as_doc(self) -> dict[str, int]:
        return asdict(self)


def dumps(doc: Any) -> bytes:
    """The file's bytes (compact, keys sorted: ``jq .`` shows it indented)."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")


def _texts_cut(raw: dict[str, Any], fitted: dict[str, Any]) -> int:
    """How many of an entry's texts ``fitted`` holds shorter than ``raw`` did (or not at all)."""
    n = int(raw["name"] != fitted["name"]) + int(raw["subject"] != fitted["subject"])
    for key in ("labels", "annotations"):
        kept = fitted[key]
        n += sum(1 for k, v in raw[key].items() if k in kept and kept[k] != v)
        n += sum(1 for k in kept if k not in raw[key])  # a name that was cut
    return n


def fit_strings(raw: Mapping[str, str], cut: Cut, limit: int = MAX_TEXT) -> dict[str, str]:
    """Labels or annotations as the reader accepts them: names and values cut, at most
    :data:`MAX_ENTRIES` of them (the rest counted as left out)."""
    items = sorted(raw.items())
    cut.entries += max(0, len(items) - MAX_ENTRIES)
    return {fields.cut(k, MAX_NAME): fields.cut(v, limit) for k, v in items[:MAX_ENTRIES]}


def fit_item(item: dict[str, Any], cut: Cut) -> dict[str, Any]:
    """One encoded alert (firing or owed) with every text within what the reader accepts."""
    out = dict(item)
    out["name"] = fields.cut(item["name"], MAX_NAME)
    out["subject"] = fields.cut(item["subject"], MAX_TEXT)
    out["labels"] = fit_strings(item["labels"], cut)
    out["annotations"] = fit_strings(item["annotations"], cut)
    if "told" in item:
        told = sorted(item["told"])
        cut.entries += max(0, len(told) - MAX_ENTRIES)
        out["told"] = [fields.cut(n, MAX_NAME) for n in told[:MAX_ENTRIES]]
    return out


def size(item: Any) -> int:
    return len(dumps(item))


def _shrink(item: dict[str, Any], share: int, cut: Cut) -> dict[str, Any]:
    """``item`` with its longest annotations cut until it fits ``share`` bytes (or each is at
    :data:`MIN_TEXT` characters: then it is as small as it is allowed to get)."""
    over = size(item) - share
    if over <= 0:
        return item
    annotations = dict(item["annotations"])
    for name in sorted(annotations, key=lambda k: -len(annotations[k])):
        value = annotations[name]
        if over <= 0 or len(value) <= MIN_TEXT:
            break
        annotations[name] = fields.cut(value, max(MIN_TEXT, len(value) - over - 64))
        over -= len(value.encode("utf-8")) - len(annotations[name].encode("utf-8"))
    return {**item, "annotations": annotations}


def _worth(entry: tuple[str, int, dict[str, Any]]) -> tuple[int, int, float]:
    """How little an entry is worth keeping (the largest goes first): owed notices before
    firing alerts, the oldest notice first; ``info`` before ``critical``, the latest fired first."""
    kind, _, item = entry
    if kind == "owed":
        return (1, 0, -float(item.get("resolved_at") or 0.0))
    return (0, _SEVERITY_WORTH.get(item.get("severity", ""), 3), float(item.get("fired_at") or 0.0))


def fit_document(
    alerts: list[dict[str, Any]], owed: Mapping[str, list[dict[str, Any]]], limit: int = MAX_STATE_BYTES
) -> dict[str, Any]:
    """The state document of ``alerts`` (encoded firing alerts with ``told``) and ``owed``
    (receiver -> encoded resolved notices), within ``limit`` bytes and every reader's bound."""
    cut = Cut()
    receivers = sorted(owed)
    cut.entries += max(0, len(receivers) - MAX_ENTRIES)
    cut.alerts += max(0, len(alerts) - MAX_ALERTS)
    raw: list[dict[str, Any]] = list(alerts[:MAX_ALERTS])
    entries: list[tuple[str, int, dict[str, Any]]] = [
        ("alert", i, fit_item(a, cut)) for i, a in enumerate(raw)
    ]
    for r, name in enumerate(receivers[:MAX_ENTRIES]):
        cut.notices += max(0, len(owed[name]) - MAX_ALERTS)
        raw += owed[name][:MAX_ALERTS]
        entries += [("owed", r, fit_item(a, cut)) for a in owed[name][:MAX_ALERTS]]
    budget = limit - HEADER
    sizes = [size(e[2]) + 1 for e in entries]
    if sum(sizes) > budget and entries:
        share = budget // len(entries)
        entries = [(k, r, _shrink(item, share, cut)) for k, r, item in entries]
        sizes = [size(e[2]) + 1 for e in entries]
    total, kept = sum(sizes), list(range(len(entries)))
    if total > budget:
        kept.sort(key=lambda i: _worth(entries[i]))
        while total > budget and kept:
            gone = kept.pop()
            total -= sizes[gone]
            cut.alerts += entries[gone][0] == "alert"
            cut.notices += entries[gone][0] == "owed"
        kept.sort()
    cut.texts += sum(_texts_cut(raw[i], entries[i][2]) for i in kept)
    entries = [entries[i] for i in kept]
    doc: dict[str, Any] = {
        "alerts": [item for kind, _, item in entries if kind == "alert"],
        "undelivered": {},
    }
    for r, name in enumerate(receivers[:MAX_ENTRIES]):
        items = [item for kind, at, item in entries if kind == "owed" and at == r]
        if items:
            doc["undelivered"][fields.cut(name, MAX_NAME)] = items
    if cut:
        doc["cut"] = cut.as_doc()
    return doc
