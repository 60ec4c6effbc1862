#!/usr/bin/env python3
"""Build (once) a cached venv with one real vLLM V1 release, for the real-vLLM probe tests.

    scripts/vllm_venv.py 0.33.0             # prints the venv's path
    scripts/vllm_venv.py 0.11.0 --force     # rebuild

The venv lives in ``${POOLWATCH_CACHE:-~/.cache/poolwatch}/vllm-venvs/VERSION`` and holds: torch
2.13.0 (the local CPU build, pinned through a constraints file), the release itself (``--no-deps``:
its own torch pin and the CUDA packages stay out; ``vllm._C`` then fails to load with a warning, and
nothing on the block pool, KV cache manager or Scheduler paths calls it), the pure-Python packages
the imports of ``vllm.v1.core`` and the Scheduler ask for (found one missing module at a time, pinned
as the release pins them when it does), and poolwatch itself (``--no-deps``, from this checkout, so
its ``vllm.general_plugins`` entry point is installed).  Only stdlib here; the shared pip helpers
come from ``sglang_venv.py`` beside this file.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sglang_venv import ROOT, TORCH, norm, pins, pip, run

MODULES = (
    "vllm.v1.core.block_pool",
    "vllm.v1.core.kv_cache_manager",
    "vllm.v1.core.kv_cache_coordinator",
    "vllm.v1.core.sched.scheduler",
    "vllm.config",
    # ModelConfig inspects the architecture by importing its module in a subprocess
    "vllm.model_executor.models.llama",
)
PIP_NAMES = {
    "zmq": "pyzmq",
    "yaml": "PyYAML",
    "PIL": "pillow",
    "google": "protobuf",
    "cpuinfo": "py-cpuinfo",
    "openai_harmony": "openai-harmony",
    "partial_json_parser": "partial-json-parser",
    "cv2": "opencv-python-headless",
    "tvm_ffi": "apache-tvm-ffi",
    "attr": "attrs",
    "dateutil": "python-dateutil",
}
# the known pure-Python needs, installed in one go (the loop below adds what a release asks beyond)
BASE = (
    "numpy",
    "packaging",
    "psutil",
    "pyzmq",
    "regex",
    "msgspec",
    "pydantic",
    "cbor2",
    "transformers",
    "requests",
    "aiohttp",
    "openai",
    "pillow",
    "pybase64",
    "cachetools",
    "cloudpickle",
    "py-cpuinfo",
    "prometheus_client",
    "fastapi",
    "partial-json-parser",
    "einops",
    "blake3",
    "tqdm",
    "sentencepiece",
    "PyYAML",
    # asked for one at a time by 0.11.0 and 0.33.0 (each round re-imports vLLM: ~40 s); named here
    "openai-harmony",
    "uvloop",
    "llguidance",
    "setproctitle",
    "diskcache",
    "gguf",
)
# installed with --no-deps: their declared dependencies pull in triton or torch builds we do not want
NO_DEPS = ("xgrammar",)


def missing_module(venv: Path) -> tuple[str | None, str]:
    code = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\n"
    out = run([str(venv / "bin" / "python"), "-c", code, *MODULES])
    if out.returncode == 0:
        return None, ""
    found = re.findall(r"No module named '([^'.]+)", out.stderr)
    return (found[-1] if found else None), out.stderr[-2500:]


def download(venv: Path, version: str) -> Path:
    wheel_dir = Path(tempfile.mkdtemp(prefix="vllm-wheel-"))
    py = str(venv / "bin" / "python")
    dl = run([py, "-m", "pip", "download", "-q", "--no-deps", f"vllm=={version}", "-d", str(wheel_dir)])
    if dl.returncode != 0:
        raise SystemExit(f"cannot download vllm=={version}:\n{dl.stderr[-2000:]}")
    return next(wheel_dir.glob("vllm-*.whl"))


def build(version: str, dest: Path, python: str) -> None:
    tmp = dest.with_name(dest.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    run([python, "-m", "venv", str(tmp)])
    (tmp / "constraints.txt").write_text(TORCH + "\n")
    pip(tmp, TORCH)
    wheel = download(tmp, version)
    pinned = pins(wheel)
    pip(tmp, "--no-deps", str(wheel))
    pip(tmp, *(pinned.get(norm(n), n) for n in BASE))
    pip(tmp, "--no-deps", *(pinned.get(norm(n), n) for n in NO_DEPS))
    for _ in range(60):
        module, err = missing_module(tmp)
        if module is None and not err:
            break
        if module is None:
            raise SystemExit(f"vllm=={version}: the check modules do not import:\n{err}")
        req = pinned.get(norm(PIP_NAMES.get(module, module)), PIP_NAMES.get(module, module))
        print(f"  {version}: installing {req} (for `import {module}`)", file=sys.stderr)
        pip(tmp, req)
    pip(tmp, "--no-deps", str(ROOT))
    (tmp / ".complete").write_text(version + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    shutil.rmtree(wheel.parent, ignore_errors=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("version")
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    parser.add_argument("--python", default=sys.executable, help="the Python 3.11 to base the venv on")
    args = parser.parse_args(argv)
    cache = Path(os.environ.get("POOLWATCH_CACHE") or Path.home() / ".cache" / "poolwatch")
    dest = cache / "vllm-venvs" / args.version
    if args.force or not (dest / ".complete").exists():
        print(f"building {dest} ...", file=sys.stderr)
        started = time.monotonic()
        build(args.version, dest, args.python)
        print(f"built {dest} in {time.monotonic() - started:.0f} s", file=sys.stderr)
    print(dest)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
