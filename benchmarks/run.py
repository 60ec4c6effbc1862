"""Run every benchmark (``benchmarks/bench_*.py``, each with a ``main()``) and print their tables.

    scripts/bench                 # all of them
    scripts/bench probe emulator  # only bench_probe.py and bench_emulator.py

Benchmarks print figures and ratios; they never assert on timing (these machines are shared).
"""

from __future__ import annotations

import importlib.util
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent


def machine() -> str:
    cpus = os.cpu_count() or 0
    return f"{platform.node()} · {platform.machine()} · {cpus} CPUs · Python {platform.python_version()}"


def run(path: Path) -> int:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        print(f"cannot load {path}", file=sys.stderr)
        return 1
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    started = time.perf_counter()
    print(f"\n### {path.stem.removeprefix('bench_')}\n", flush=True)
    argv, sys.argv = sys.argv, [str(path)]  # each benchmark parses its own (default) arguments
    try:
        code = module.main()
    finally:
        sys.argv = argv
    print(f"\n({path.name}: {time.perf_counter() - started:.1f} s)", flush=True)
    return int(code or 0)


def main(argv: list[str]) -> int:
    wanted = set(argv)
    benches = sorted(
        p for p in HERE.glob("bench_*.py") if not wanted or p.stem.removeprefix("bench_") in wanted
    )
    if not benches:
        print(f"no benchmark matches {sorted(wanted)}", file=sys.stderr)
        return 2
    print(f"# poolwatch benchmarks — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n\n{machine()}")
    return max(run(p) for p in benches)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
