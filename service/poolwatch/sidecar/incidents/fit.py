"""What one incident may weigh: every record within its share of the incidents file.  Pure.

The incidents file is read back whole or not at all (:mod:`~poolwatch.sidecar.incidents.file`: at
most :data:`~poolwatch.sidecar.incidents.file.MAX_BYTES`), so a file past it would restore no
incident at all.  So it never is written past it (bounded by construction): each of the at most
``limit`` records gets an equal share (:func:`record_budget`), and a record over its share is made
to fit by :func:`fit_body`, which sheds, in this order, until it fits:

1. the rank's moments before the first sighting, oldest first (the one just before it last);
2. the moments after it, the latest first (the first after it last);
3. the slot ids named (the count still says how many; down to 64), the last action's ids of each
   guard action (down to 8), the engine frames of the call site (down to 4), the ranks of the
   worker seen (down to 8);
4. the sidecar's settings (replaced by a note).

What was shed is said in the body's ``cut`` (``{"moments_before": 3, "ids": 960, ...}``), which the
Markdown bundle shows under its own heading; the figures at the first sighting are never shed.  A
record that still does not fit (only a body this module never made could) is left out of the file
and logged.  The usual record is a few kilobytes: nothing is shed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["HEADER", "body_bytes", "fit_body", "record_budget"]

HEADER = 64 << 10  # bytes of the file kept for its version, brackets and each record's id and rank


def body_bytes(body: dict[str, Any]) -> int:
    """How many bytes ``body`` takes in the file (as :func:`save_incidents` writes it)."""
    return len(json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8"))


def record_budget(max_bytes: int, limit: int) -> int:
    """The bytes each of ``limit`` records may take in a file of ``max_bytes``."""
    return max(4096, (max_bytes - HEADER) // max(1, limit) - 2048)


def _note(body: dict[str, Any], what: str, n: int) -> None:
    if n > 0:
        cut = body.setdefault("cut", {})
        cut[what] = cut.get(what, 0) + n


def _drop_before(body: dict[str, Any]) -> bool:
    if body["first_moment"] <= 0:
        return False
    del body["moments"][0]
    body["first_moment"] -= 1
    _note(body, "moments_before", 1)
    return True


def _drop_after(body: dict[str, Any]) -> bool:
    if len(body["moments"]) <= body["first_moment"] + 1:
        return False
    del body["moments"][-1]
    _note(body, "moments_after", 1)
    return True


def _shorten(holder: dict[str, Any], key: str, keep: int, body: dict[str, Any], what: str) -> bool:
    items = holder.get(key)
    if not isinstance(items, list) or len(items) <= keep:
        return False
    _note(body, what, len(items) - keep)
    holder[key] = items[:keep]
    return True


def _ids(body: dict[str, Any]) -> bool:
    return _shorten(body["finding"], "ids", 64, body, "ids")


def _action_ids(body: dict[str, Any]) -> bool:
    return any(_shorten(a, "ids", 8, body, "action_ids") for a in body["guard"]["actions"])


def _frames(body: dict[str, Any]) -> bool:
    site = body.get("call_site")
    return isinstance(site, dict) and _shorten(site, "frames", 4, body, "frames")


def _ranks(body: dict[str, Any]) -> bool:
    return _shorten(body["engine"], "ranks_seen", 8, body, "ranks_seen")


def _settings(body: dict[str, Any]) -> bool:
    p = body["poolwatch"]
    if not isinstance(p.get("settings"), dict) or not p["settings"]:
        return False
    p["settings"] = {}
    _note(body, "settings", 1)
    return True


_STEPS: tuple[Callable[[dict[str, Any]], bool], ...] = (
    _drop_before,
    _drop_after,
    _ids,
    _action_ids,
    _frames,
    _ranks,
    _settings,
)


def fit_body(body: dict[str, Any], budget: int) -> bool:
    """Shed from ``body`` (in place, as the module docstring says) until it takes at most
    ``budget`` bytes; False when even then it does not fit."""
    size = body_bytes(body)
    for step in _STEPS:
        while size > budget and step(body):
            size = body_bytes(body)
        if size <= budget:
            return True
    return size <= budget
