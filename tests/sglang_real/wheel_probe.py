"""The installed wheel's probe activation inside a real SGLang release, in spawned processes.

Run with the Python of an SGLang release venv into which the built poolwatch wheel was installed
(``tests/sglang_real/test_wheel_in_sglang.py`` does that), from a directory outside the checkout::

    python wheel_probe.py pth       # SGLang 0.5.4 - 0.5.10: poolwatch-probe.pth + POOLWATCH_PROBE=1
    python wheel_probe.py plugin    # SGLang >= 0.5.12: the sglang.srt.plugins entry point

Every case starts a fresh interpreter with ``multiprocessing``'s spawn method, as SGLang starts its
scheduler, tokenizer and detokenizer processes, with the case's environment.  A scheduler child
imports SGLang's real scheduler module and builds a real ``Scheduler``; only the body of its
``__init__`` (model loading on a GPU) is replaced, before any probe code sees the class, by one
that sets the rank attributes.  The parent imports nothing but the standard library and prints one
JSON line per check: ``{"check": name, "ok": bool, "detail": ...}``; the exit code is the number of
failed checks.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import multiprocessing
import os
import sys
import tempfile
import types
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SCHEDULER = "sglang.srt.managers.scheduler"
# What poolwatch must never pull into a process that builds no scheduler.
HEAVY = (
    "torch",
    "numpy",
    "fastapi",
    "starlette",
    "uvicorn",
    "httpx",
    "pydantic",
    "prometheus_client",
    "yaml",
    "http.server",
    "poolwatch.sidecar",
    "poolwatch.sources",
    "poolwatch.detect",
    "poolwatch.notify",
    "poolwatch.commands",
    "sglang",
)
RESULTS: list[dict[str, Any]] = []


def report(check: str, ok: bool, detail: Any = None) -> None:
    RESULTS.append({"check": check, "ok": bool(ok), "detail": detail})
    print(json.dumps(RESULTS[-1], default=str), flush=True)


def heavy(modules: Sequence[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def _light_init(self: Any, *args: Any, **kwargs: Any) -> None:
    """Stands in for ``Scheduler.__init__``'s model and GPU set-up: only the rank attributes."""
    self.tp_rank, self.dp_rank, self.pp_rank, self.gpu_id = 0, 0, 0, 0


class _LightScheduler(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds SGLang's scheduler module with the path finder and, once it has executed, replaces
    ``Scheduler.__init__`` -- before a post-import hook armed earlier (the probe's) sees it."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != SCHEDULER:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            self.real = spec.loader
            spec.loader = self
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self.real.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: types.ModuleType) -> None:
        self.real.exec_module(module)
        module.Scheduler.__init__ = _light_init


def _arm_light_scheduler() -> None:
    index = sys.meta_path.index(importlib.machinery.PathFinder)
    sys.meta_path.insert(index, _LightScheduler())


def _poolwatch_state() -> dict[str, Any]:
    """What poolwatch has done to this process so far (read without importing anything)."""
    modules = sorted(sys.modules)
    return {
        "poolwatch_modules": [m for m in modules if m == "poolwatch" or m.startswith("poolwatch.")],
        "heavy": heavy(modules)[:8],  # the first few (SGLang's own imports are many)
        "post_import_hooks": [type(f).__name__ for f in sys.meta_path if type(f).__name__ == "_PostImport"],
    }


def _probe_of(sched: Any, directory: str) -> dict[str, Any]:
    probe = getattr(sched, "_poolwatch_probe", None)
    out: dict[str, Any] = {"probe": type(probe).__name__ if probe is not None else None}
    files = sorted(p.name for p in Path(directory).glob("*.json"))
    out["discovery_files"] = files
    if probe is not None and files:
        entry = json.loads((Path(directory) / files[0]).read_text())
        out["discovery_pid_is_this_process"] = entry.get("pid") == os.getpid()
        with urllib.request.urlopen(entry["url"].rstrip("/") + "/healthz", timeout=10) as resp:
            out["healthz"] = json.loads(resp.read())
        out["probe_module_file"] = sys.modules[type(probe).__module__].__file__
    return out


def scheduler_child(conn: Any, plugin: bool) -> None:
    """A scheduler process: SGLang's module imported, (0.5.12+) its plugins loaded, a Scheduler built."""
    out: dict[str, Any] = {"at_start": _poolwatch_state()}
    _arm_light_scheduler()
    import importlib

    module = importlib.import_module(SCHEDULER)
    if plugin:
        from sglang.srt.plugins import load_plugins

        load_plugins()
    cls = module.Scheduler
    out["wrapped"] = sorted(cls.__dict__.get("__poolwatch_originals__", {}))
    if out["wrapped"]:
        from poolwatch.probe.core.hooks import hook_names
        from poolwatch.probe.sglang.engine import SGLANG

        out["hookable"] = sorted({"__init__", *hook_names(cls, SGLANG.hooks)})
    sched = cls(None, None, 0, 0, 0, 0, 0, None)
    out.update(_probe_of(sched, os.environ.get("POOLWATCH_PROBE_DIR", "")))
    out["at_end"] = _poolwatch_state()
    conn.send(out)


def plain_child(conn: Any, plugin: bool) -> None:
    """A process that builds no scheduler (tokenizer, detokenizer, HTTP server)."""
    out: dict[str, Any] = {"at_start": _poolwatch_state()}
    if plugin:
        before = set(sys.modules)
        from sglang.srt.plugins import load_plugins

        after_sglang = set(sys.modules)
        load_plugins()
        added = sorted(set(sys.modules) - after_sglang)
        out["added_by_plugins"] = [m for m in heavy(added) if not m.startswith("sglang")]
        out["poolwatch_added"] = len([m for m in added if m.startswith("poolwatch")])
        out["sglang_added"] = len(after_sglang - before)
        out["at_end"] = _poolwatch_state()
    out["discovery_files"] = sorted(p.name for p in Path(os.environ["POOLWATCH_PROBE_DIR"]).glob("*.json"))
    conn.send(out)


def spawn(target: Any, env: dict[str, str | None], plugin: bool) -> dict[str, Any]:
    """Run ``target`` in a freshly spawned interpreter with ``env`` applied to the environment."""
    saved = dict(os.environ)
    for key, value in env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    try:
        ctx = multiprocessing.get_context("spawn")
        reader, writer = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=target, args=(writer, plugin))
        proc.start()
        writer.close()
        result: dict[str, Any] = reader.recv() if reader.poll(600) else {}  # read before join: pipe buffer
        proc.join(60)
        if proc.is_alive():
            proc.kill()
        unknown = dict.fromkeys(("poolwatch_modules", "heavy", "post_import_hooks"))
        return result or {"exitcode": proc.exitcode, "at_start": unknown, "at_end": unknown}  # it crashed
    finally:
        os.environ.clear()
        os.environ.update(saved)


def wheel_installed() -> None:
    from importlib import metadata

    dist = metadata.distribution("poolwatch")
    site = Path(str(dist.locate_file(""))).resolve()
    direct = json.loads(dist.read_text("direct_url.json") or "{}")
    report(
        "poolwatch is installed from a wheel archive, with its .pth at the root of site-packages",
        direct.get("url", "").endswith(".whl")
        and "archive_info" in direct
        and (site / "poolwatch-probe.pth").is_file()
        and site.is_relative_to(Path(sys.prefix).resolve()),
        {"direct_url": direct, "site": str(site), "prefix": sys.prefix},
    )


def check_pth(probe_dir: str) -> None:
    from poolwatch.engines import ENGINES  # the parent's import: each spawned child starts bare

    armed = {"POOLWATCH_PROBE": "1", "POOLWATCH_PROBE_DIR": probe_dir, "SGLANG_PLUGINS": None}
    plain = spawn(plain_child, armed, plugin=False)
    report(
        "POOLWATCH_PROBE=1: a spawned process that builds no scheduler gets the post-import hooks "
        "(one per engine poolwatch knows) and nothing heavy",
        plain["at_start"]["post_import_hooks"] == ["_PostImport"] * len(ENGINES)
        and plain["at_start"]["heavy"] == []
        and plain["discovery_files"] == [],
        plain,
    )
    sched = spawn(scheduler_child, armed, plugin=False)
    report(
        "POOLWATCH_PROBE=1: the .pth wraps the real Scheduler in a spawned scheduler process",
        bool(sched.get("wrapped")) and sched.get("wrapped") == sched.get("hookable"),
        sched,
    )
    report(
        "POOLWATCH_PROBE=1: the Scheduler is born with a probe that serves /healthz on loopback and "
        "writes its discovery file",
        sched.get("probe") == "SglangProbe"
        and len(sched.get("discovery_files", [])) == 1
        and sched.get("discovery_pid_is_this_process") is True
        and sched.get("healthz", {}).get("ok") is True
        and str(sched.get("probe_module_file", "")).startswith(sys.prefix),
        {k: sched.get(k) for k in ("probe", "discovery_files", "healthz", "probe_module_file")},
    )
    off = spawn(scheduler_child, {**armed, "POOLWATCH_PROBE": None}, plugin=False)
    report(
        "without POOLWATCH_PROBE the .pth imports nothing and leaves the Scheduler alone",
        off["at_start"]["poolwatch_modules"] == []
        and off["at_start"]["post_import_hooks"] == []
        and off.get("wrapped") == []
        and off.get("probe") is None
        and off.get("discovery_files") == []
        and off["at_end"]["poolwatch_modules"] == [],
        off,
    )


def check_plugin(probe_dir: str) -> None:
    named = {"SGLANG_PLUGINS": "poolwatch", "POOLWATCH_PROBE": None, "POOLWATCH_PROBE_DIR": probe_dir}
    plain = spawn(plain_child, named, plugin=True)
    report(
        "SGLANG_PLUGINS=poolwatch: in a process that builds no scheduler (as the detokenizer) the "
        "plugin adds nothing heavy",
        plain.get("added_by_plugins") == []
        and plain["at_start"]["poolwatch_modules"] == []
        and "poolwatch.probe.sglang.engine" in plain["at_end"]["poolwatch_modules"]
        and plain["discovery_files"] == [],
        plain,
    )
    sched = spawn(scheduler_child, named, plugin=True)
    report(
        "SGLANG_PLUGINS=poolwatch: SGLang's load_plugins() wraps the real Scheduler in a spawned "
        "scheduler process, which is born with a serving probe",
        bool(sched.get("wrapped"))
        and sched.get("wrapped") == sched.get("hookable")
        and sched["at_start"]["poolwatch_modules"] == []
        and sched.get("probe") == "SglangProbe"
        and sched.get("healthz", {}).get("ok") is True
        and len(sched.get("discovery_files", [])) == 1,
        sched,
    )
    unnamed = spawn(scheduler_child, {**named, "SGLANG_PLUGINS": None}, plugin=True)
    report(
        "SGLANG_PLUGINS unset: SGLang calls every installed plugin, and poolwatch's does nothing",
        "poolwatch.probe.sglang.engine" in unnamed["at_end"]["poolwatch_modules"]
        and unnamed.get("wrapped") == []
        and unnamed.get("probe") is None
        and unnamed.get("discovery_files") == [],
        unnamed,
    )
    other = spawn(scheduler_child, {**named, "SGLANG_PLUGINS": "someone_else"}, plugin=True)
    report(
        "SGLANG_PLUGINS naming another plugin: poolwatch is not even imported",
        other["at_end"]["poolwatch_modules"] == [] and other.get("wrapped") == [],
        {k: other.get(k) for k in ("wrapped", "at_end")},
    )
    both = spawn(scheduler_child, {**named, "POOLWATCH_PROBE": "1"}, plugin=True)
    report(
        "SGLANG_PLUGINS=poolwatch and POOLWATCH_PROBE=1 together: one probe, the Scheduler wrapped once",
        both.get("wrapped") == both.get("hookable")
        and both.get("probe") == "SglangProbe"
        and len(both.get("discovery_files", [])) == 1,
        {k: both.get(k) for k in ("wrapped", "probe", "discovery_files")},
    )


def main(argv: list[str]) -> int:
    wheel_installed()
    for mode in argv:
        with tempfile.TemporaryDirectory(prefix="poolwatch-probe-") as probe_dir:
            {"pth": check_pth, "plugin": check_plugin}[mode](probe_dir)
    return sum(not r["ok"] for r in RESULTS)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
