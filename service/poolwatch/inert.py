"""Text from an engine, a snapshot or a log made inert wherever it lands.  Pure, stdlib only.

A worker or model name, a release, a queue, a hook, a request id, a frame or a message reaches
poolwatch from the engine (a probe's snapshot, vLLM's ``/version``, a ``/metrics`` page, a log, a
discovery file) and goes on to a metric label, the API, an alert, a Markdown bundle and a terminal.
A control character there is an instruction to whatever shows it: ``ESC [`` recolours or rewrites
a terminal (``ESC ] 52`` writes the clipboard), a carriage return overwrites the line an operator
reads, a new line starts a Markdown heading, a bidirectional override shows text in another order
than it is.  So every such text is made inert once, where it enters (:func:`inert`): each C0
control character and DEL becomes its visible Control Pictures sign (``ESC`` -> ``␛``, CR -> ``␍``,
LF -> ``␊``), each C1 control character and each invisible or direction-changing format
character (U+200B-U+200F, U+202A-U+202E, U+2060-U+2064, U+2066-U+2069, U+2028, U+2029, U+061C,
U+FEFF) becomes U+FFFD.  One character for one: a text's length, and so every bound checked on
it, is unchanged; the operator still sees that something was there.

Where it lands, each page escapes for itself as well (Markdown: :mod:`poolwatch.sidecar.incidents.
export`; receivers: :mod:`poolwatch.artifacts.notification_text`; the status page: ``textContent``).
"""

from __future__ import annotations

import re

__all__ = ["inert", "is_inert"]

_PICTURES = {c: 0x2400 + c for c in range(0x20)} | {0x7F: 0x2421}
_HIDDEN = [*range(0x80, 0xA0), 0x061C, *range(0x200B, 0x2010), *range(0x2028, 0x202F)]
_HIDDEN += [*range(0x2060, 0x2065), *range(0x2066, 0x206A), 0xFEFF]
_TABLE = _PICTURES | dict.fromkeys(_HIDDEN, 0xFFFD)
_UNSAFE = re.compile("[" + "".join(re.escape(chr(c)) for c in sorted(_TABLE)) + "]")


def inert(text: str) -> str:
    """``text`` with every control and invisible format character replaced (see the module's
    docstring); the same object when there is none (the common case costs one scan)."""
    return text if _UNSAFE.search(text) is None else text.translate(_TABLE)


def is_inert(text: str) -> bool:
    """Whether ``text`` holds no character :func:`inert` would replace."""
    return _UNSAFE.search(text) is None
