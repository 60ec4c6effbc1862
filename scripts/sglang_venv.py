#!/usr/bin/env python3
"""Build (once) a cached venv with one real SGLang release, for the real-SGLang probe tests.

    scripts/sglang_venv.py 0.5.4.post1            # prints the venv's path
    scripts/sglang_venv.py 0.5.23 --force         # rebuild

The venv lives in ``${POOLWATCH_CACHE:-~/.cache/poolwatch}/sglang-venvs/VERSION`` and holds: the
release itself (``--no-deps``), the small pure-Python packages its imports need (pinned as the
release pins them when it does), stand-ins for the GPU-kernel packages (``sgl_kernel``,
``torchvision``, ``flashinfer`` ...: an import finder that serves empty modules), and poolwatch
itself (``--no-deps``, from this checkout, so the wheel's ``poolwatch-probe.pth`` is there too).
torch 2.13.0's CPU build (pinned through a constraints file, so no dependency drags in a CUDA
build) and real ``triton`` (it imports on a CPU box) come from layers shared by the release venvs
(``venv_build.py`` beside this file, which does the building).  Only stdlib here.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from venv_build import TORCH, Engine, main

STUBBED = (
    "sgl_kernel",
    "sglang_kernel",
    "torchvision",
    "flashinfer",
    "deep_gemm",
    "vllm",
    "decord",
    "cuda",
    "torch_memory_saver",
    "flash_mla",
    "deep_ep",
    "sgl_deep_gemm",
    "mooncake",
)
MODULES = (
    "sglang.srt.managers.scheduler",
    "sglang.srt.managers.schedule_batch",
    "sglang.srt.mem_cache.memory_pool",
)
PIP_NAMES = {
    "zmq": "pyzmq",
    "yaml": "PyYAML",
    "PIL": "pillow",
    "google": "protobuf",
    "cv2": "opencv-python-headless",
    "sklearn": "scikit-learn",
    "jwt": "PyJWT",
    "dateutil": "python-dateutil",
    "attr": "attrs",
}
BASE = (
    "numpy",
    "packaging",
    "transformers",
    "tqdm",
    "requests",
    "pydantic",
    "pybase64",
    "IPython",
    "aiohttp",
    "pillow",
    "orjson",
    "pyzmq",
    "fastapi",
    "msgspec",
    "openai",
    "xgrammar",
    "partial_json_parser",
    "sentencepiece",
    "dill",
    "setproctitle",
    "compressed-tensors",
    "gguf",
    "einops",
    "psutil",
    "uvicorn",
)

STUB_MODULE = '''"""Stand-ins for GPU-kernel packages (written by poolwatch scripts/sglang_venv.py)."""
import importlib.abc, importlib.machinery, sys, types

STUBBED = {stubbed!r}


class _Meta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _stub(name)

    def __getitem__(cls, item):
        return cls

    def __or__(cls, other):
        return cls

    __ror__ = __or__


def _stub(name):
    return _Meta(name, (), {{"__init__": lambda self, *a, **k: None, "__call__": lambda self, *a, **k: self}})


class _Module(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _stub(name)


def _from_torch():
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if not frame.f_code.co_filename.startswith("<frozen") and name != __name__:
            return name.split(".")[0] == "torch"
        frame = frame.f_back
    return False


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] not in STUBBED or _from_torch():
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        module = _Module(spec.name)
        module.__path__ = []
        module.__version__ = "0.0.0"
        return module

    def exec_module(self, module):
        return None


sys.meta_path.append(_Finder())
'''


def stand_ins(site: Path) -> None:
    """The import finder that serves the GPU-kernel packages as empty modules, loaded at start-up."""
    (site / "_poolwatch_sglang_stubs.py").write_text(STUB_MODULE.format(stubbed=STUBBED))
    (site / "_poolwatch_sglang_stubs.pth").write_text("import _poolwatch_sglang_stubs\n")


SGLANG = Engine(
    name="sglang",
    modules=MODULES,
    base=BASE,
    pip_names=PIP_NAMES,
    layers=(TORCH, "triton"),
    stubbed=STUBBED,
    prepare=stand_ins,
)


if __name__ == "__main__":
    sys.exit(main(SGLANG, __doc__ or "", sys.argv[1:]))
