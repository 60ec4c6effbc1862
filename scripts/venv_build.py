"""The venv building shared by ``sglang_venv.py`` and ``vllm_venv.py`` (only stdlib here).

A release venv lives in ``${POOLWATCH_CACHE:-~/.cache/poolwatch}/<engine>-venvs/VERSION`` and is
made once, in ``VERSION.building`` and renamed when ``.complete`` is written (a warm run checks that
stamp and does nothing else).  It holds the release itself (``--no-deps``), the pure-Python packages
its check modules import (pinned as the release pins them when it does; what is still missing is
found by importing those modules and installing the module named missing, until they import), and
poolwatch itself (``--no-deps``, from this checkout, so its ``.pth`` and entry points are there).

The heavy packages every release shares are not installed into each venv: each *layer* (torch's
CPU build for all five releases, triton for SGLang's) is installed once with ``pip install
--target`` into ``<cache>/layers/<requirement>`` and named by a ``.pth`` file in the venv's
site-packages.  A layer's directory comes after the venv's own site-packages on ``sys.path``, so a
release that pins another version of one of a layer's dependencies gets its own copy, and pip never
removes anything from a layer (it is outside the venv).  A lock serialises builders of one layer,
so the release venvs can be built in parallel.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TORCH = "torch==2.13.0"
IMPORT_CHECK = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\n"


@dataclass(frozen=True)
class Engine:
    """What one engine's release venvs need; ``prepare`` writes into site-packages before the checks."""

    name: str  # the distribution: sglang, vllm
    modules: tuple[str, ...]  # imported until they import
    base: tuple[str, ...]  # the known needs, installed in one go
    pip_names: Mapping[str, str]  # import name -> distribution name
    layers: tuple[str, ...] = (TORCH,)
    no_deps: tuple[str, ...] = ()  # installed with --no-deps
    if_pinned: tuple[str, ...] = ()  # installed with the known needs when the release pins them
    stubbed: tuple[str, ...] = ()  # never installed (a stand-in serves them)
    prepare: Callable[[Path], None] = field(default=lambda site: None)


def cache_root() -> Path:
    return Path(os.environ.get("POOLWATCH_CACHE") or Path.home() / ".cache" / "poolwatch")


def run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, check=False, text=True, capture_output=True, **kw)  # type: ignore[call-overload]


def pip(venv: Path, *args: str) -> None:
    """``pip install`` into the venv under its constraints; no bytecode (compiled on first import)."""
    python = str(venv / "bin" / "python")
    out = run(
        [python, "-m", "pip", "install", "-q", "--no-compile", "-c", str(venv / "constraints.txt"), *args]
    )
    if out.returncode != 0:
        raise SystemExit(f"pip install {' '.join(args)} failed:\n{out.stderr[-3000:]}")


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(wheel: Path) -> dict[str, str]:
    """``{normalised name: requirement}`` for the release's unconditional ``==`` pins."""
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(meta).decode()
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = re.match(r"Requires-Dist: ([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*(==[^;\s]+)?\s*(;.*)?$", line)
        if m and m.group(3) and not (m.group(4) and "extra" in m.group(4)):
            out[norm(m.group(1))] = m.group(1) + m.group(3)
    return out


def requirement(name: str, pinned: Mapping[str, str]) -> str:
    return pinned.get(norm(name), name)


def missing_module(venv: Path, modules: tuple[str, ...]) -> tuple[str | None, str]:
    out = run([str(venv / "bin" / "python"), "-c", IMPORT_CHECK, *modules])
    if out.returncode == 0:
        return None, ""
    found = re.findall(r"No module named '([^'.]+)", out.stderr)
    return (found[-1] if found else None), out.stderr[-2500:]


def download(python: str, dist: str, version: str) -> Path:
    wheel_dir = Path(tempfile.mkdtemp(prefix=f"{dist}-wheel-"))
    dl = run([python, "-m", "pip", "download", "-q", "--no-deps", f"{dist}=={version}", "-d", str(wheel_dir)])
    if dl.returncode != 0:
        raise SystemExit(f"cannot download {dist}=={version}:\n{dl.stderr[-2000:]}")
    return next(wheel_dir.glob(f"{dist}-*.whl"))


@contextmanager
def step(label: str) -> Iterator[None]:
    started = time.monotonic()
    yield
    print(f"  {label}: {time.monotonic() - started:.0f} s", file=sys.stderr)


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Held by one builder at a time (the others wait): ``path`` is the lock file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def overlay(
    dist: str, version: str, base: str, keep: Callable[[str], bool], python: str, *, force: bool
) -> Path:
    """The overlay of ``dist`` ``version``: the members of its wheel that ``keep`` names, unpacked
    once (under a lock) into ``<cache>/<dist>-overlays/<version>``, stamped with the ``base``
    release whose venv it runs on.  Its path."""
    root = cache_root() / f"{dist}-overlays"
    dest = root / version
    with locked(root / f"{version}.lock"):
        if force or not (dest / ".complete").exists():
            started = time.monotonic()
            shutil.rmtree(dest, ignore_errors=True)
            building = root / f"{version}.building"
            shutil.rmtree(building, ignore_errors=True)
            wheel = download(python, dist, version)
            with zipfile.ZipFile(wheel) as zf:
                zf.extractall(building, [n for n in zf.namelist() if keep(n)])
            shutil.rmtree(wheel.parent, ignore_errors=True)
            (building / ".complete").write_text(base + "\n")
            building.rename(dest)
            print(f"fetched {dest} in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return dest


def overlay_main(
    dist: str,
    bases: Mapping[str, str],
    keep: Callable[[str], bool],
    doc: str,
    argv: list[str],
    then: Callable[[str, str], object] = lambda version, python: None,
) -> int:
    """An overlay script's command line: ``VERSION [--force] [--python PY]``, one of ``bases`` (the
    release -> the venv it runs on); makes its :func:`overlay`, runs ``then(version, python)`` (what
    else the release needs) and prints the overlay's path and its base venv."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n", maxsplit=1)[0])
    parser.add_argument("version", choices=sorted(bases))
    parser.add_argument("--force", action="store_true", help="fetch again even if cached")
    parser.add_argument("--python", default=sys.executable, help="the Python whose pip downloads")
    args = parser.parse_args(argv)
    dest = overlay(dist, args.version, bases[args.version], keep, args.python, force=args.force)
    then(args.version, args.python)
    print(dest, bases[args.version])
    return 0


def layer(requirement: str, python: str) -> Path:
    """The directory holding ``requirement`` and its dependencies, installed once (under a lock)."""
    root = cache_root() / "layers"
    dest = root / re.sub(r"[^A-Za-z0-9.+-]+", "-", requirement)
    with locked(root / f"{dest.name}.lock"):
        if (dest / ".complete").exists():
            return dest
        tmp = dest.with_name(dest.name + ".building")
        shutil.rmtree(tmp, ignore_errors=True)
        constraints = root / f"{dest.name}.constraints.txt"
        constraints.write_text(TORCH + "\n")
        with step(f"layer {requirement}"):
            cmd = [python, "-m", "pip", "install", "-q", "--target", str(tmp), "-c", str(constraints)]
            out = run([*cmd, requirement])
        if out.returncode != 0:
            raise SystemExit(f"pip install --target {tmp} {requirement} failed:\n{out.stderr[-3000:]}")
        (tmp / ".complete").write_text(requirement + "\n")
        shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)
    return dest


def build(engine: Engine, version: str, dest: Path, python: str) -> None:
    tmp = dest.with_name(dest.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run([python, "-m", "venv", str(tmp)], check=True)
    (tmp / "constraints.txt").write_text(TORCH + "\n")
    site = next((tmp / "lib").glob("python3*/site-packages"))
    with step(f"{version}: download the release"):
        wheel = download(str(tmp / "bin" / "python"), engine.name, version)
    for requirement_ in engine.layers:
        path = layer(requirement_, str(tmp / "bin" / "python"))
        (site / f"_poolwatch_layer_{path.name}.pth").write_text(f"{path}\n")
    pinned = pins(wheel)
    with step(f"{version}: install the release and its known needs"):
        pip(tmp, "--no-deps", str(wheel))
        pip(
            tmp,
            *(requirement(n, pinned) for n in engine.base),
            *(pinned[norm(n)] for n in engine.if_pinned if norm(n) in pinned),
        )
        if engine.no_deps:
            pip(tmp, "--no-deps", *(requirement(n, pinned) for n in engine.no_deps))
            needs = no_deps_needs(site, engine)
            if needs:  # what a --no-deps package itself requires of the pinned ones wins over the pin
                pip(tmp, *needs)
    engine.prepare(site)
    with step(f"{version}: import the check modules until they import"):
        install_missing(engine, version, tmp, pinned)
    # setuptools builds in the checkout (build/, *.egg-info): one builder at a time
    with step(f"{version}: install poolwatch from this checkout"):
        refresh_poolwatch(tmp)
    (tmp / ".complete").write_text(version + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    shutil.rmtree(wheel.parent, ignore_errors=True)


def no_deps_needs(site: Path, engine: Engine) -> list[str]:
    """The requirements the ``--no-deps`` packages declare on the ``if_pinned`` ones (a release may
    pin one older than the package it also pins needs: vLLM 0.26.0's apache-tvm-ffi for xgrammar)."""
    wanted = {norm(n) for n in engine.if_pinned}
    needs: list[str] = []
    for name in engine.no_deps:
        for meta in site.glob(f"{norm(name).replace('-', '_')}-*.dist-info/METADATA"):
            for line in meta.read_text(errors="replace").splitlines():
                if not line.startswith("Requires-Dist:") or ";" in line:
                    continue
                spec = line.removeprefix("Requires-Dist:").strip()
                if norm(re.split(r"[<>=!~ \[(]", spec, maxsplit=1)[0]) in wanted:
                    needs.append(spec)
    return needs


POOLWATCH_STAMP = ".poolwatch-installed"
# what an installed poolwatch carries beyond its code (which PYTHONPATH takes from the checkout): the
# entry points and the .pth file; when they change, a cached venv reinstalls poolwatch
PACKAGING = ("pyproject.toml", "setup.py", "service/poolwatch/probe/poolwatch-probe.pth")


def packaging_stamp() -> str:
    digest = hashlib.sha256()
    for name in PACKAGING:
        digest.update(name.encode() + b"\0" + (ROOT / name).read_bytes())
    return digest.hexdigest()[:16]


def refresh_poolwatch(venv: Path) -> bool:
    """Install poolwatch from this checkout into ``venv`` unless the one there has this checkout's
    entry points and ``.pth`` already (a warm cache built from an older checkout would otherwise keep
    the old ones); True when it installed.  setuptools builds in the checkout: one at a time."""
    stamp = venv / POOLWATCH_STAMP
    want = packaging_stamp()
    if stamp.is_file() and stamp.read_text().strip() == want:
        return False
    with locked(cache_root() / "poolwatch.lock"):
        pip(venv, "--no-deps", "--force-reinstall", str(ROOT))
    stamp.write_text(want + "\n")
    return True


def install_missing(engine: Engine, version: str, venv: Path, pinned: Mapping[str, str]) -> None:
    for _ in range(60):
        module, err = missing_module(venv, engine.modules)
        if module is None and not err:
            return
        if module is None or module in engine.stubbed:
            raise SystemExit(f"{engine.name}=={version}: the check modules do not import:\n{err}")
        req = requirement(engine.pip_names.get(module, module), pinned)
        print(f"  {version}: installing {req} (for `import {module}`)", file=sys.stderr)
        pip(venv, req)
    raise SystemExit(f"{engine.name}=={version}: still missing modules after 60 installs")


def main(engine: Engine, doc: str, argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=doc.split("\n\n", maxsplit=1)[0])
    parser.add_argument("version")
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    parser.add_argument("--python", default=sys.executable, help="the Python 3.11 to base the venv on")
    args = parser.parse_args(argv)
    dest = cache_root() / f"{engine.name}-venvs" / args.version
    if args.force or not (dest / ".complete").exists():
        print(f"building {dest} ...", file=sys.stderr)
        started = time.monotonic()
        build(engine, args.version, dest, args.python)
        print(f"built {dest} in {time.monotonic() - started:.0f} s", file=sys.stderr)
    elif refresh_poolwatch(dest):
        print(f"{dest}: poolwatch reinstalled (its entry points or .pth changed)", file=sys.stderr)
    print(dest)
    return 0
