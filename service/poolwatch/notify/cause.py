"""What makes a firing alert's text worth telling again: its cause, not its figures.

The sidecar's description of a conservation alert changes on every sample (the iteration,
the gap of a growing leak) but its *cause* changes rarely and matters: a tripwire names the slot ids,
the hook and the requests; the basis turns exact; the crash warning appears.  :func:`cause` is the
description with the iteration dropped and every number outside a bracketed id list replaced by
``#`` (and plurals made singular): equal causes are one story, a different one is an update
every receiver gets at once.
"""

from __future__ import annotations

import re

from poolwatch.detect.alert import Alert

__all__ = ["cause"]

_ITERATION = re.compile(r",? (?:at )?iteration \d+")
_NUMBER = re.compile(r"(\[[\d, .]*\])|[-+]?\d+(?:\.\d+)?")
_PLURAL = re.compile(r"\b(slot|request|error)s\b")


def cause(alert: Alert) -> str:
    """The alert's description with the per-sample figures taken out (the summary is fixed per
    alert name: it tells nothing new)."""
    text = _ITERATION.sub("", alert.annotations.get("description", ""))
    text = _PLURAL.sub(r"\1", _NUMBER.sub(lambda m: m.group(1) or "#", text))
    return text
