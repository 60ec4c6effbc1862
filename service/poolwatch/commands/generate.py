"""``poolwatch generate``: render the rules, dashboards and Alertmanager configuration for your settings.

In a clone every generator of :data:`poolwatch.artifacts.registry.GENERATORS` runs (the README
tables and the engine pages' release tables too) and ``--check`` fails on drift.  From an
installed package (no clone), ``--out DIR`` is required and the deployable artifacts alone are
written under it (:data:`~poolwatch.artifacts.registry.DEPLOYABLE`: the Prometheus rules file, the
PrometheusRule, the dashboards, the Alertmanager configuration).  ``--config FILE`` builds them from
the settings a sidecar runs with (a YAML mapping of settings, keyed by their ``POOLWATCH_*``
environment names or field names, plus ``selector`` and ``cluster_label``), so the Prometheus rules
wait as long as that sidecar's detector.  The committed artifacts use the defaults.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path

import yaml

from poolwatch.artifacts.registry import DEPLOYABLE, GENERATORS, Generator, drift, write_all
from poolwatch.detect.config import MixinConfig
from poolwatch.errors import ConfigError
from poolwatch.settings.parse import ENV_PREFIX
from poolwatch.settings.sidecar import Settings

__all__ = ["add_arguments", "is_clone", "load_config", "run"]

_MIXIN_ONLY = ("selector", "cluster_label")  # rules and dashboards only; the sidecar has no use for them


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--root",
        type=Path,
        default=Path.cwd(),
        help="a clone of poolwatch, whose README and docs are rewritten too (default: .; "
        "outside a clone only the deployable artifacts are written, under --out)",
    )
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if anything is stale")
    parser.add_argument(
        "--config",
        type=Path,
        help="YAML settings (POOLWATCH_* names or field names, plus selector and cluster_label) "
        "to build the artifacts from (default: the defaults, as committed)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="write (or check) the artifacts under this directory (default: the clone itself; "
        "required outside a clone)",
    )


def is_clone(root: Path) -> bool:
    """Whether ``root`` is a checkout of poolwatch (its pyproject names the project, its README is there)."""
    try:
        text = (root / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return False
    return 'name = "poolwatch"' in text and (root / "README.md").is_file()


def _setting(key: object) -> str:
    name = str(key)
    return (name[len(ENV_PREFIX) :] if name.startswith(ENV_PREFIX) else name).lower()


def load_config(path: Path) -> MixinConfig:
    """The mixin config of a sidecar run with the settings in ``path``."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: {exc}") from None
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{path}: expected a mapping of settings to values")
    values = {_setting(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in raw.items()}
    extra = {k: values.pop(k) for k in _MIXIN_ONLY if k in values}
    return Settings.from_values(values).mixin(**extra)


def run(args: argparse.Namespace) -> int:
    root: Path = args.root
    generators: tuple[Generator, ...] = GENERATORS
    if not is_clone(root):
        if args.out is None:
            print(
                f"poolwatch generate: {root} is not a clone of poolwatch: give --out DIR to write the "
                "rules, dashboards and Alertmanager configuration there",
                file=sys.stderr,
            )
            return 2
        generators = DEPLOYABLE
    try:
        config = load_config(args.config) if args.config else MixinConfig()
    except ConfigError as exc:
        print(f"poolwatch generate: configuration error: {exc}", file=sys.stderr)
        return 2
    try:
        if args.check:
            stale = drift(root, config, args.out, generators)
            for path in stale:
                print(f"stale: {path} (run `poolwatch generate`)", file=sys.stderr)
            return 1 if stale else 0
        for path in write_all(root, config, args.out, generators):
            print(f"wrote {path}")
    except ConfigError as exc:  # a hand-written file a generator writes into is not ready for it
        print(f"poolwatch generate: {exc}", file=sys.stderr)
        return 2
    return 0
