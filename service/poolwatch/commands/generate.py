"""``poolwatch generate``: write every generated artifact; --check fails on drift.

The README tables, the Prometheus rules file, the PrometheusRule, the runbook index and the
dashboards: every generator of :data:`poolwatch.artifacts.registry.GENERATORS` runs.  ``--config FILE`` builds
them from the settings a sidecar runs with (a YAML mapping of settings, keyed by their
``POOLWATCH_*`` environment names or field names, plus ``selector`` and ``cluster_label``), so the
Prometheus rules wait as long as that sidecar's detector; ``--out DIR`` writes them there instead
of into the repository.  The committed artifacts use the defaults.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path

import yaml

from poolwatch.artifacts.registry import drift, write_all
from poolwatch.detect.config import MixinConfig
from poolwatch.errors import ConfigError
from poolwatch.settings.parse import ENV_PREFIX
from poolwatch.settings.sidecar import Settings

__all__ = ["add_arguments", "load_config", "run"]

_MIXIN_ONLY = ("selector", "cluster_label")  # rules and dashboards only; the sidecar has no use for them


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="repository root (default: .)")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if anything is stale")
    parser.add_argument(
        "--config",
        type=Path,
        help="YAML settings (POOLWATCH_* names or field names, plus selector and cluster_label) "
        "to build the artifacts from (default: the defaults, as committed)",
    )
    parser.add_argument("--out", type=Path, help="write (or check) the artifacts under this directory")


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
    if not (root / "pyproject.toml").is_file():
        print(f"poolwatch generate: {root} is not the repository root", file=sys.stderr)
        return 2
    try:
        config = load_config(args.config) if args.config else MixinConfig()
    except ConfigError as exc:
        print(f"poolwatch generate: configuration error: {exc}", file=sys.stderr)
        return 2
    try:
        if args.check:
            stale = drift(root, config, args.out)
            for path in stale:
                print(f"stale: {path} (run `poolwatch generate`)", file=sys.stderr)
            return 1 if stale else 0
        for path in write_all(root, config, args.out):
            print(f"wrote {path}")
    except ConfigError as exc:  # a hand-written file a generator writes into is not ready for it
        print(f"poolwatch generate: {exc}", file=sys.stderr)
        return 2
    return 0
