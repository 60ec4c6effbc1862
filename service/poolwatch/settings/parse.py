"""Strings to typed settings values: one field's conversion, its range check, one group built.

Every error is a :class:`~poolwatch.errors.ConfigError` with one line naming the setting's
``POOLWATCH_*`` variable; :mod:`poolwatch.settings.sidecar` applies this to every group.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any, get_type_hints

from poolwatch.engines import UnknownEngine, read_engine
from poolwatch.errors import ConfigError
from poolwatch.limits import LimitError
from poolwatch.model.rank import Role

__all__ = ["ENV_PREFIX", "build_group", "env_name"]

ENV_PREFIX = "POOLWATCH_"


def env_name(field_name: str) -> str:
    """The ``POOLWATCH_*`` variable of a setting."""
    return ENV_PREFIX + field_name.upper()


def build_group(group: type[Any], values: Mapping[str, str]) -> Any:
    """One settings group from the raw strings of its fields (the others keep their defaults)."""
    hints = get_type_hints(group)
    kwargs = {
        f.name: _convert(f.name, hints[f.name], values[f.name]) for f in fields(group) if f.name in values
    }
    try:
        return group(**kwargs)
    except LimitError as exc:
        raise ConfigError(str(exc)) from None


def _convert(name: str, kind: Any, raw: str) -> Any:
    try:
        value = _CONVERTERS[kind](raw.strip())
    except (ValueError, KeyError):
        expected = _EXPECTED.get(kind, str(kind))
        raise ConfigError(f"{env_name(name)}: expected {expected}, got {raw!r}") from None
    _check_range(name, value)
    return value


def _bool(raw: str) -> bool:
    lowered = raw.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(raw)


def _positive_number(raw: str) -> float:
    value = float(raw)
    if not value > 0 or value == float("inf"):
        raise ValueError(raw)
    return value


def _list(raw: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in raw.split(",") if item.strip())


_CONVERTERS: dict[Any, Any] = {
    str: str,
    int: int,
    float: _positive_number,
    bool: _bool,
    tuple[str, ...]: _list,
    Role: Role,
}
_EXPECTED = {
    int: "an integer",
    float: "a number > 0",
    bool: "true or false",
    Role: "one of prefill, decode, unified",
}
_MINIMUM = {
    "port": 0,
    "scrape_concurrency": 1,
    "max_body_bytes": 1024,  # and at most 1 GiB
    "history": 1,
    "history_budget": 1,
    "history_bytes": 1 << 20,
    "notify_queue": 1,
}

_MAXIMUM = {"port": 65535, "max_body_bytes": 1 << 30}


def _check_range(name: str, value: Any) -> None:
    if name in _MINIMUM and value < _MINIMUM[name]:
        raise ConfigError(f"{env_name(name)}: must be at least {_MINIMUM[name]}, got {value}")
    if name in _MAXIMUM and value > _MAXIMUM[name]:
        raise ConfigError(f"{env_name(name)}: must be at most {_MAXIMUM[name]}, got {value}")
    if name == "engine":
        try:
            read_engine(value)
        except UnknownEngine as exc:
            raise ConfigError(f"{env_name(name)}: {exc}") from None
    if name == "log_level" and value.lower() not in ("debug", "info", "warning", "error"):
        raise ConfigError(f"{env_name(name)}: expected debug, info, warning or error, got {value!r}")
    if name == "log_format" and value not in ("text", "json"):
        raise ConfigError(f"{env_name(name)}: expected text or json, got {value!r}")
