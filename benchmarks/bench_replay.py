"""``poolwatch replay`` on a large mixed SGLang log: wall time and peak RSS.

The log is generated into a temporary directory (default 200 MB): batch lines in the older
``Prefill batch.`` / ``Decode batch.`` form and the newer ``Decode batch [N],`` form, two DP ranks
and a TP rank, HTTP access lines, lines behind a Ray actor prefix and with ANSI colour, a
warning-form leak report, a traceback interleaved with another rank's line and a multi-pool leak
report near the end.  Replay runs in a child process (``python -m poolwatch.cli replay``), so
its peak RSS is the child's own.

Run: ``python benchmarks/bench_replay.py [--mb 200] [--keep PATH]``.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL_SECONDS = 27.0
GOAL_RSS_MB = 58.0

_BLOCK = (
    "[2026-05-16 {hh}:{mm}:{ss} DP0 TP0] Decode batch [{n}], #running-req: 12, #full token: {used}, "
    "full token usage: 0.02, mamba num: 24, mamba usage: 0.06, cuda graph: True, "
    "gen throughput (token/s): 812.33, #queue-req: 0\n"
    "[2026-05-16 {hh}:{mm}:{ss} DP1 TP1] Prefill batch, #new-seq: 1, #new-token: 512, #cached-token: 0, "
    "full token usage: 0.01, mamba usage: 0.05, #running-req: 12, #queue-req: 2, "
    "input throughput (token/s): 4102.03, cuda graph: False\n"
    "[2026-05-16 {hh}:{mm}:{ss} TP0] Decode batch. #running-req: 3, #token: {used}, token usage: 0.01, "
    "gen throughput (token/s): 240.19, #queue-req: 0\n"
    '[2026-05-16 {hh}:{mm}:{ss}] INFO:     127.0.0.1:40022 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
    "(SGLangEngine pid=4242) [2026-05-16 {hh}:{mm}:{ss} TP0] Prefill batch. #new-seq: 2, #new-token: 96, "
    "#cached-token: 0, token usage: 0.01, #running-req: 1, #queue-req: 0\n"
    "\x1b[32m[2026-05-16 {hh}:{mm}:{ss} TP0]\x1b[0m Decode batch. #running-req: 3, #token: {used}, "
    "token usage: 0.01, gen throughput (token/s): 240.19, #queue-req: 0\n"
)

_TAIL = (
    "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py:1326: UserWarning: "
    "token_to_kv_pool_allocator memory leak detected! available_size=961586, protected_size=0, "
    "self.max_total_num_tokens=961593\n"
    "self.token_to_kv_pool_allocator.available_size()=961586\n"
    "self.tree_cache.evictable_size()=0\n\n  warnings.warn(msg)\n"
    "[2026-05-16 23:59:58 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 3190, in run\n'
    "[2026-05-16 23:59:58 TP1] Decode batch. #running-req: 1, #token: 40, token usage: 0.00, "
    "gen throughput (token/s): 1.00, #queue-req: 0\n"
    "ValueError: pool memory leak detected! [full] total=512000, available=511000, evictable=1000, "
    "protected=0, session_held=0, uncached=0\n"
    "[swa] total=65536, available=65537, evictable=0, protected=0, session_held=0, uncached=0\n"
)


def generate(path: Path, megabytes: int) -> int:
    """Write about ``megabytes`` MB of log to ``path``; returns its size in bytes."""
    target = megabytes * 1_000_000
    written = 0
    n = 0
    with path.open("w", encoding="utf-8") as out:
        while written < target:
            chunk = []
            for _ in range(200):
                n += 1
                second = n // 40
                hh, mm, ss = (second // 3600) % 24, (second // 60) % 60, second % 60
                chunk.append(
                    _BLOCK.format(hh=f"{hh:02d}", mm=f"{mm:02d}", ss=f"{ss:02d}", n=n, used=1000 + n % 977)
                )
            text = "".join(chunk)
            out.write(text)
            written += len(text)
        out.write(_TAIL)
    return path.stat().st_size


def replay(path: Path) -> tuple[float, float, float, int]:
    """Wall seconds, CPU seconds, peak RSS (MB) and exit code of ``poolwatch replay`` on ``path``
    (CPU seconds too: on a shared machine the wall time also measures the neighbours)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    code = subprocess.run(
        [sys.executable, "-m", "poolwatch.cli", "replay", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    ).returncode
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return seconds, cpu, after.ru_maxrss / 1024, code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="size of the generated log in MB")
    parser.add_argument("--keep", type=Path, help="write the log here and keep it")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="poolwatch-bench-replay-") as tmp:
        path = args.keep or Path(tmp) / "mixed.log"
        size = generate(path, args.mb)
        seconds, cpu, rss, code = replay(path)
    print("| figure | measured | goal |")
    print("|---|---|---|")
    print(f"| log size | {size / 1e6:.0f} MB | 200 MB |")
    print(f"| replay wall time | {seconds:.1f} s | <= {GOAL_SECONDS:.0f} s |")
    print(f"| replay CPU time (user + system) | {cpu:.1f} s | |")
    print(f"| replay peak RSS | {rss:.0f} MB | <= {GOAL_RSS_MB:.0f} MB |")
    print(f"| throughput | {size / 1e6 / seconds:.1f} MB/s wall, {size / 1e6 / cpu:.1f} MB/s CPU | |")
    print(f"| exit code | {code} | 1 (the log ends in a leak report) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
