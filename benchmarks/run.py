"""Run every benchmark (``benchmarks/bench_*.py``, each with a ``main()``) and print their tables.

    scripts/bench                 # all of them
    scripts/bench probe emulator  # only bench_probe.py and bench_emulator.py

Benchmarks print figures and ratios; they never assert on timing (these machines are shared).
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent


def machine() -> str:
    cpus = os.cpu_count() or 0
    return f"{platform.node()} · {platform.machine()} · {cpus} CPUs · Python {platform.python_version()}"


def run(path: Path) -> int:
    """One benchmark in its own interpreter, so one's imports (torch) never weigh on another's
    CPU and RSS figures."""
    started = time.perf_counter()
    print(f"\n### {path.stem.removeprefix('bench_')}\n", flush=True)
    code = subprocess.run([sys.executable, str(path)], check=False).returncode
    print(f"\n({path.name}: {time.perf_counter() - started:.1f} s)", flush=True)
    return code


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
