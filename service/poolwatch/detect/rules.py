"""Every detector family, listed once, and every alert they raise: the one source for the detector,
the Prometheus rules, the runbook index, the README's table and the dashboards' alert panels
(monitoring-mixins style).

:data:`FAMILIES` is every module of :mod:`poolwatch.detect.families`, each one's ``FAMILY``
(:class:`~poolwatch.detect.family.Family`); a module there without one is an error at import, so no
family is ever silently left out.  They are ordered by what their alerts are about (pool, rank,
target, the sidecar itself: :class:`~poolwatch.detect.schema.Scope`), then by name, which is the
order of the generated rules and tables.  :func:`alert_definitions` lists every family's alerts with
their thresholds and waits taken from a config; :func:`by_name` finds one.  The sidecar's detector
(:mod:`poolwatch.detect.detector`) and the generated Prometheus rules (:mod:`poolwatch.artifacts.rules`)
raise the same names with the same labels.
"""

from __future__ import annotations

import importlib
import pkgutil

from poolwatch.detect import families
from poolwatch.detect.config import MixinConfig
from poolwatch.detect.family import Family
from poolwatch.detect.schema import AlertDef, Scope

__all__ = ["ALERTS", "FAMILIES", "alert_definitions", "by_name", "discover", "family_of"]

_SCOPES = tuple(Scope)


def _order(family: Family) -> tuple[int, str]:
    return (_SCOPES.index(family.alerts(MixinConfig())[0].scope), family.name)


def discover(package: str = families.__name__) -> tuple[Family, ...]:
    """The ``FAMILY`` of every module of ``package``, in :func:`_order`; a module without one, or
    one whose family is named otherwise, raises :class:`TypeError`."""
    found = []
    for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
        module = importlib.import_module(f"{package}.{info.name}")
        family = getattr(module, "FAMILY", None)
        if not isinstance(family, Family) or family.name != info.name:
            raise TypeError(f"{module.__name__} must define FAMILY = Family(name={info.name!r}, ...)")
        found.append(family)
    return tuple(sorted(found, key=_order))


FAMILIES: tuple[Family, ...] = discover()


def alert_definitions(
    config: MixinConfig | None = None, of: tuple[Family, ...] = FAMILIES
) -> tuple[AlertDef, ...]:
    """Every alert of every family, its rules' thresholds and waits taken from ``config`` (default:
    the defaults); two families may not raise one name."""
    config = config or MixinConfig()
    out = tuple(alert for family in of for alert in family.alerts(config))
    names = [a.name for a in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"alerts defined twice: {', '.join(twice)}")
    return out


ALERTS: tuple[AlertDef, ...] = alert_definitions()


def by_name(name: str) -> AlertDef:
    for alert in ALERTS:
        if alert.name == name:
            return alert
    raise KeyError(f"no alert named {name!r}")


def family_of(name: str) -> Family:
    """The family that raises the alert ``name``."""
    for family in FAMILIES:
        if name in family.names:
            return family
    raise KeyError(f"no family raises an alert named {name!r}")
