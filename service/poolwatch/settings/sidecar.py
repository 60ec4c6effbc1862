"""Typed settings, built once at the edge from ``POOLWATCH_*`` environment and command-line flags.

Every field of every group is one environment variable (``POOLWATCH_`` + the field name in upper
case) and one flag (``--`` + the field name with dashes).  Flags win over the environment.  A bad
value raises :class:`~poolwatch.errors.ConfigError` with one line naming the setting; the CLI
prints it and exits 2.  Lists are comma-separated.  The groups are in
:mod:`poolwatch.settings.groups`, one value's conversion and range check in
:mod:`poolwatch.settings.parse`; this module joins them into :class:`Settings`.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from dataclasses import Field, dataclass, field, fields
from typing import Any

from poolwatch.detect.config import DetectorConfig, MixinConfig
from poolwatch.detect.rules import FAMILIES
from poolwatch.detect.thresholds import Thresholds, help_of
from poolwatch.errors import ConfigError
from poolwatch.limits import Limits
from poolwatch.naming import namespace_name, pod_name, worker_name
from poolwatch.settings.groups import (
    AlertSettings,
    IdentitySettings,
    ScrapeSettings,
    ServerSettings,
    TargetSettings,
)
from poolwatch.settings.help import HELP, SHOWN_DEFAULTS, show_default
from poolwatch.settings.parse import build_group, env_name

__all__ = [
    "FAMILY_THRESHOLDS",
    "Settings",
    "add_flags",
    "from_args",
    "help_line",
    "setting_fields",
    "setting_groups",
]


@dataclass(frozen=True, slots=True)
class Settings:
    server: ServerSettings = field(default_factory=ServerSettings)
    scrape: ScrapeSettings = field(default_factory=ScrapeSettings)
    targets: TargetSettings = field(default_factory=TargetSettings)
    identity: IdentitySettings = field(default_factory=IdentitySettings)
    alerting: AlertSettings = field(default_factory=AlertSettings)
    detection: DetectorConfig = field(default_factory=DetectorConfig)  # thresholds, checked there
    limits: Limits = field(default_factory=Limits)  # per-target caps, ranges checked there

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        """Settings from ``POOLWATCH_*`` variables (others are ignored)."""
        return cls.from_values(_env_values(environ), environ)

    @classmethod
    def from_values(cls, values: Mapping[str, str], environ: Mapping[str, str] | None = None) -> Settings:
        """Settings from raw strings keyed by field name; unknown names are an error."""
        known = {f.name for f in setting_fields()}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"{env_name(unknown[0])}: unknown setting")
        groups = {name: build_group(group, values) for name, group in _GROUPS.items()}
        families = tuple(  # the families given a threshold; the others read their defaults
            build_group(kind, values) for kind in FAMILY_THRESHOLDS.values() if _names(kind) & set(values)
        )
        groups["detection"] = dataclasses.replace(groups["detection"], families=families)
        settings = cls(**groups)
        return settings.with_default_worker(environ or {})

    def mixin(self, *, selector: str = "", cluster_label: str = "") -> MixinConfig:
        """What the detector, the generated rules and the dashboards share, as these settings say."""
        a = self.alerting
        return MixinConfig(
            detector=self.detection,
            runbook_base_url=a.runbook_base_url,
            dashboard_url=a.dashboard_url,
            fleet_dashboard_uid=a.fleet_dashboard_uid,
            worker_dashboard_uid=a.worker_dashboard_uid,
            selector=selector,
            cluster_label=cluster_label,
        )

    def with_default_worker(self, environ: Mapping[str, str]) -> Settings:
        """Fill the identity the flags and ``POOLWATCH_*`` left empty, the one way
        :mod:`poolwatch.naming` names a worker and its pod."""
        ident = self.identity
        filled = dataclasses.replace(
            ident,
            worker=ident.worker or worker_name(environ),
            namespace=ident.namespace or namespace_name(environ),
            pod=ident.pod or pod_name(environ),
        )
        return self if filled == ident else dataclasses.replace(self, identity=filled)


_GROUPS: dict[str, type[Any]] = {
    "server": ServerSettings,
    "scrape": ScrapeSettings,
    "targets": TargetSettings,
    "identity": IdentitySettings,
    "alerting": AlertSettings,
    "detection": DetectorConfig,
    "limits": Limits,
}


# the detector families' own thresholds (poolwatch.detect.thresholds), one group per family that has them
FAMILY_THRESHOLDS: dict[str, type[Thresholds]] = {
    f"detection: {family.title.lower()}": family.thresholds for family in FAMILIES if family.thresholds
}


def _names(group: type[Any]) -> set[str]:
    return {f.name for f in fields(group)}


def setting_groups() -> dict[str, type[Any]]:
    """Every settings group by its ``--help`` section: the sidecar's, then each family's thresholds."""
    return {**_GROUPS, **FAMILY_THRESHOLDS}


def setting_fields() -> list[Field[Any]]:
    """Every setting: one variable and one flag each (a field marked ``setting=False`` is none)."""
    return [
        f for group in setting_groups().values() for f in fields(group) if f.metadata.get("setting", True)
    ]


def help_line(f: Field[Any]) -> str:
    """What a setting means: its threshold's own line, or :data:`HELP`'s."""
    return help_of(f) or HELP[f.name]


def _env_values(environ: Mapping[str, str]) -> dict[str, str]:
    names = {env_name(f.name): f.name for f in setting_fields()}
    return {names[k]: v for k, v in environ.items() if k in names}


def add_flags(parser: argparse.ArgumentParser) -> None:
    """One ``--flag`` per setting, its help saying what it does, its default and its variable
    (values stay strings until :meth:`Settings.from_values`)."""
    for group_name, group in setting_groups().items():
        section = parser.add_argument_group(group_name)
        for f in fields(group):
            if not f.metadata.get("setting", True):
                continue
            flag = "--" + f.name.replace("_", "-")
            shown = SHOWN_DEFAULTS.get(f.name) or show_default(f.default)
            text = f"{help_line(f)} (default: {shown}; env {env_name(f.name)})"
            section.add_argument(
                flag, dest=f"setting_{f.name}", metavar="VALUE", help=text.replace("%", "%%")
            )


def from_args(args: argparse.Namespace, environ: Mapping[str, str]) -> Settings:
    """Flags over environment."""
    values = _env_values(environ)
    for key, value in vars(args).items():
        if key.startswith("setting_") and value is not None:
            values[key.removeprefix("setting_")] = value
    return Settings.from_values(values, environ)
