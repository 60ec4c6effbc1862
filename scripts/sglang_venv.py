#!/usr/bin/env python3
"""Build (once) a cached venv with one real SGLang release, for the real-SGLang probe tests.

    scripts/sglang_venv.py 0.5.4.post1            # prints the venv's path
    scripts/sglang_venv.py 0.5.23 --force         # rebuild

The venv lives in ``${POOLWATCH_CACHE:-~/.cache/poolwatch}/sglang-venvs/VERSION`` and holds:
torch 2.13.0 (pinned through a constraints file, so no dependency drags in a CUDA build), the
release itself (``--no-deps``), the small pure-Python packages its imports need (pinned as the
release pins them when it does), real ``triton`` (it imports on a CPU box), stand-ins for the
GPU-kernel packages (``sgl_kernel``, ``torchvision``, ``flashinfer`` ...: an import finder that
serves empty modules), and poolwatch itself (``--no-deps``, from this checkout, so the wheel's
``poolwatch-probe.pth`` is there too).  The missing imports are found by importing the modules
the checks use and installing what is named missing, until they import.  Only stdlib here.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TORCH = "torch==2.13.0"
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
    "triton",
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


def run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, check=False, text=True, capture_output=True, **kw)  # type: ignore[call-overload]


def pip(venv: Path, *args: str) -> None:
    out = run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            "-c",
            str(venv / "constraints.txt"),
            *args,
        ]
    )
    if out.returncode != 0:
        raise SystemExit(f"pip install {' '.join(args)} failed:\n{out.stderr[-3000:]}")


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


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement(module: str, pinned: dict[str, str]) -> str:
    name = PIP_NAMES.get(module, module)
    return pinned.get(norm(name), name)


def missing_module(venv: Path) -> tuple[str | None, str]:
    code = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\n"
    out = run([str(venv / "bin" / "python"), "-c", code, *MODULES])
    if out.returncode == 0:
        return None, ""
    found = re.findall(r"No module named '([^'.]+)", out.stderr)
    return (found[-1] if found else None), out.stderr[-2500:]


def build(version: str, dest: Path, python: str) -> None:
    tmp = dest.with_name(dest.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run([python, "-m", "venv", str(tmp)], check=True)
    (tmp / "constraints.txt").write_text(TORCH + "\n")
    pip(tmp, TORCH)
    wheel_dir = Path(tempfile.mkdtemp(prefix="sglang-wheel-"))
    dl = run(
        [
            str(tmp / "bin" / "python"),
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            f"sglang=={version}",
            "-d",
            str(wheel_dir),
        ]
    )
    if dl.returncode != 0:
        raise SystemExit(f"cannot download sglang=={version}:\n{dl.stderr[-2000:]}")
    wheel = next(wheel_dir.glob("sglang-*.whl"))
    pinned = pins(wheel)
    pip(tmp, "--no-deps", str(wheel))
    pip(tmp, *(pinned.get(norm(n), n) for n in BASE))
    site = next((tmp / "lib").glob("python3*/site-packages"))
    (site / "_poolwatch_sglang_stubs.py").write_text(STUB_MODULE.format(stubbed=STUBBED))
    (site / "_poolwatch_sglang_stubs.pth").write_text("import _poolwatch_sglang_stubs\n")
    for _ in range(60):
        module, err = missing_module(tmp)
        if module is None and not err:
            break
        if module is None or module in STUBBED:
            raise SystemExit(f"sglang=={version}: the check modules do not import:\n{err}")
        print(
            f"  {version}: installing {requirement(module, pinned)} (for `import {module}`)", file=sys.stderr
        )
        pip(tmp, requirement(module, pinned))
    pip(tmp, "--no-deps", str(ROOT))
    (tmp / ".complete").write_text(version + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    shutil.rmtree(wheel_dir, ignore_errors=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("version")
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    parser.add_argument("--python", default=sys.executable, help="the Python 3.11 to base the venv on")
    args = parser.parse_args(argv)
    cache = Path(os.environ.get("POOLWATCH_CACHE") or Path.home() / ".cache" / "poolwatch")
    dest = cache / "sglang-venvs" / args.version
    if args.force or not (dest / ".complete").exists():
        print(f"building {dest} ...", file=sys.stderr)
        build(args.version, dest, args.python)
    print(dest)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
