"""The sidecar's memory under the largest valid snapshots, as fast as it takes them (issue 42).

Ten probes (``flood_probes.py``) each answer every long-poll at once with a new schema-valid
snapshot just under the 4 MiB body limit (128 tripwires of 4,000 slot ids and 8 requests each,
every one a new finding), while a real ``poolwatch serve`` watches them with the shipped
settings, its state and incidents files on.  The sidecar runs in a memory cgroup with the
manifests' limit (``deploy/``: 256 MiB) when this runs as root on a machine with the cgroup v1
memory controller (so a breach is a real OOM kill, as in a pod); elsewhere its RSS is read alone.

Printed: RSS every minute, peak RSS and the cgroup's peak usage against the limit, snapshots
taken in (``poolwatch_target_scrapes``: whole bodies decoded), whether the sidecar was alive and
answering ``/healthz`` at the end, and OOM kills.  Before the byte budgets, schema-valid 3.4 MB
snapshots once a second from one source took the sidecar from 312 MB to 1,227 MB in two minutes.

    python benchmarks/bench_memory_flood.py                 # 10 sources, 600 s (docs/benchmarks.md)
    python benchmarks/bench_memory_flood.py --seconds 60    # the hostile tier's shorter run
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from rigs.stack.processes import end

HERE = Path(__file__).parent
LIMIT_MIB = 256  # deploy/kubernetes/components/sidecar/sidecar.yaml: resources.limits.memory
CGROUP_ROOT = Path("/sys/fs/cgroup/memory")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


@contextlib.contextmanager
def memory_cgroup(limit_mib: int) -> Iterator[Path | None]:
    """A cgroup v1 memory group limited to ``limit_mib`` (None where none can be made)."""
    if os.geteuid() != 0 or not (CGROUP_ROOT / "cgroup.procs").exists():
        yield None
        return
    group = CGROUP_ROOT / f"poolwatch-bench-{os.getpid()}"
    try:
        group.mkdir()
        (group / "memory.limit_in_bytes").write_text(str(limit_mib << 20))
        with contextlib.suppress(OSError):
            (group / "memory.memsw.limit_in_bytes").write_text(str(limit_mib << 20))  # no swap either
    except OSError:
        yield None
        return
    try:
        yield group
    finally:
        with contextlib.suppress(OSError):
            group.rmdir()


def cgroup_figure(group: Path | None, name: str) -> str:
    if group is None:
        return "-"
    with contextlib.suppress(OSError):
        return (group / name).read_text().strip()
    return "-"


@contextlib.contextmanager
def flood(ranks: int, seconds: float) -> Iterator[tuple[int, int]]:
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "flood_probes.py"), str(ranks), str(seconds + 120)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        port, size = proc.stdout.readline().split()
        yield int(port), int(size)
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def scrapes(url: str) -> int:
    with contextlib.suppress(httpx.HTTPError, ValueError):
        return sum(t["scrapes"] for t in httpx.get(f"{url}/api/v1/targets", timeout=10).json())
    return -1


def sidecar_env(work: Path, port: int, probes: int, ranks: int) -> dict[str, str]:
    """The sidecar as shipped, watching the ``ranks`` flood probes, its state files on."""
    return {
        **os.environ,
        "POOLWATCH_HOST": "127.0.0.1",
        "POOLWATCH_PORT": str(port),
        "POOLWATCH_WORKER": "flood",
        "POOLWATCH_PROBE_URLS": ",".join(f"http://127.0.0.1:{probes}/rank{r}" for r in range(ranks)),
        "POOLWATCH_STATE_FILE": str(work / "state" / "alerts.json"),
        "POOLWATCH_LOG_LEVEL": "warning",
        "POOLWATCH_STALE_AFTER": "1e6",
    }


def start(env: dict[str, str], log: Path, group: Path | None) -> subprocess.Popen[bytes]:
    """``poolwatch serve``, in ``group`` when there is one (joined before it runs poolwatch)."""
    procs = str(group / "cgroup.procs") if group is not None else ""

    def join() -> None:
        if procs:
            Path(procs).write_text(str(os.getpid()))

    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "poolwatch.cli", "serve"],
            env=env,
            stdout=out,
            stderr=out,
            preexec_fn=join,  # noqa: PLW1509 (the benchmark's parent is single-threaded)
        )


def watch(proc: subprocess.Popen[bytes], url: str, seconds: float) -> tuple[float, bool]:
    """RSS every second for ``seconds`` (a line a minute); the peak, and whether it lived."""
    started, peak, minute = time.monotonic(), 0.0, 0
    print("| minute | RSS (MiB) | snapshots taken in |")
    print("|---|---|---|")
    while (elapsed := time.monotonic() - started) < seconds:
        time.sleep(1.0)
        if proc.poll() is not None:
            return peak, False
        rss = rss_mib(proc.pid)
        peak = max(peak, rss)
        if elapsed >= 60 * (minute + 1) or elapsed + 1 >= seconds:
            minute += 1
            print(f"| {elapsed / 60:.1f} | {rss:.0f} | {scrapes(url)} |", flush=True)
    return peak, True


def run(ranks: int, seconds: float, limit_mib: int) -> int:
    """The benchmark; 0 when the sidecar lived, answered and stayed under ``limit_mib``."""
    work = Path(tempfile.mkdtemp(prefix="bench-flood-"))
    work.chmod(0o700)
    log = work / "sidecar.log"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    try:
        with flood(ranks, seconds) as (probes, size), memory_cgroup(limit_mib) as group:
            print(f"{ranks} sources, each answer {size / 1e6:.2f} MB, {seconds:g} s, limit {limit_mib} MiB")
            print(f"memory cgroup: {'yes (' + str(group) + ')' if group else 'none: RSS read alone'}\n")
            proc = start(sidecar_env(work, port, probes, ranks), log, group)
            peak, alive = watch(proc, url, seconds)
            healthy = False
            with contextlib.suppress(httpx.HTTPError):
                healthy = httpx.get(f"{url}/healthz", timeout=10).status_code == 200
            taken = scrapes(url)
            usage, failcnt = (
                cgroup_figure(group, "memory.max_usage_in_bytes"),
                cgroup_figure(group, "memory.failcnt"),
            )
            killed = "oom_kill 1" in cgroup_figure(group, "memory.oom_control") or (
                not alive and group is not None
            )
            end(proc, grace=20)
        print(f"\npeak RSS {peak:.0f} MiB (limit {limit_mib} MiB): {'under' if peak < limit_mib else 'OVER'}")
        if group is not None:
            print(
                f"cgroup peak usage {int(usage) / 2**20:.0f} MiB; limit hits {failcnt}; OOM killed: {killed}"
            )
        rate = taken / max(seconds, 1)
        print(f"snapshots taken in: {taken} ({rate:.1f} a second, {taken * size / 1e9:.1f} GB)")
        print(f"alive and answering /healthz at the end: {alive and healthy}")
        print(f"MemoryError in the log: {'MemoryError' in log.read_text(errors='replace')}")
        return 0 if alive and healthy and peak < limit_mib and not killed else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sources", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--limit-mib", type=int, default=LIMIT_MIB)
    args = parser.parse_args(argv)
    return run(args.sources, args.seconds, args.limit_mib)


if __name__ == "__main__":
    sys.exit(main())
