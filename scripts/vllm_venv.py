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
its ``vllm.general_plugins`` entry point is installed).  The torch build is a layer shared with the
other release venvs; ``venv_build.py`` beside this file does the building.  Only stdlib here.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# ROOT, TORCH, norm, pins, pip and run are the shared helpers; other venv scripts may take them from here
from venv_build import ROOT, TORCH, Engine, main, norm, pins, pip, run

__all__ = ["ROOT", "TORCH", "VLLM", "norm", "pins", "pip", "run"]

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
# asked for by a release that pins it (0.33.0: apache-tvm-ffi==0.1.11, for xgrammar's `import tvm_ffi`)
IF_PINNED = ("apache-tvm-ffi",)

VLLM = Engine(
    name="vllm", modules=MODULES, base=BASE, pip_names=PIP_NAMES, no_deps=NO_DEPS, if_pinned=IF_PINNED
)


if __name__ == "__main__":
    sys.exit(main(VLLM, __doc__ or "", sys.argv[1:]))
