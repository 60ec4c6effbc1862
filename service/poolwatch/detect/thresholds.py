"""A detector family's own thresholds, declared in its module: a frozen dataclass subclassing
:class:`Thresholds`, each field a :func:`threshold` with its default and its one line of help.  Pure.

The family names the class (``Family(thresholds=...)``); the sidecar's settings read every family's
class as one more settings group (``POOLWATCH_<FIELD>``, ``--<field>``, its help from the field),
and the detector's :class:`~poolwatch.detect.config.DetectorConfig` carries the values given
(:meth:`~poolwatch.detect.config.DetectorConfig.of`), so a new family's thresholds are written
once, in its module, and never in the settings, the help or the shared config.

Range checks are the same for every threshold: at least 1 for an integer and 0 for a number
(NaN refused), and a share in (0, 1] where the field says ``share=True``.
"""

from __future__ import annotations

from dataclasses import Field, dataclass, field, fields
from typing import Any

from poolwatch.errors import ConfigError

__all__ = ["Thresholds", "check_ranges", "help_of", "threshold"]


def threshold(default: float, help_: str, *, share: bool = False) -> Any:
    """A threshold field: its default, its help line (``--help`` and the docs), and whether it is a
    share of a pool (in (0, 1])."""
    return field(default=default, metadata={"help": help_, "share": share})


def help_of(f: Field[Any]) -> str | None:
    """The help line a :func:`threshold` field carries (``None``: the field is not one)."""
    text = f.metadata.get("help")
    return text if isinstance(text, str) else None


def check_ranges(value: object) -> None:
    """Every numeric field of the dataclass ``value`` in range, or :class:`ConfigError` naming its
    variable (fields marked ``setting=False`` are not settings and are skipped)."""
    for f in fields(value):  # type: ignore[arg-type]
        if f.metadata.get("setting", True) is False:
            continue
        got = getattr(value, f.name)
        least = 1 if f.type == "int" else 0
        if not got >= least:  # also rejects NaN
            raise ConfigError(f"POOLWATCH_{f.name.upper()}: must be at least {least}, got {got}")
        if f.metadata.get("share") and not 0 < got <= 1:
            raise ConfigError(f"POOLWATCH_{f.name.upper()}: must be in (0, 1], got {got}")


@dataclass(frozen=True, slots=True)
class Thresholds:
    """The base of a family's thresholds: checked on construction."""

    def __post_init__(self) -> None:
        check_ranges(self)
