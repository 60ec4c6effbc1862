"""The sidecar as a process watching a fake fleet (``fake_fleet.py``): what it costs in CPU and memory,
how fast it answers ``/metrics``, whether every target is scraped on time; and what those figures
make watching 10,000 ranks cost (:func:`fleet_plan`).  ``fleet_measures.py``'s ``fleet*`` and
``sidecar8`` measures; like them, it uses only what the previous build has too.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TICK = os.sysconf("SC_CLK_TCK")
FLEET_PORTS = 4
INTERVAL = 1.0


def proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def proc_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_fleet(mode: str = "steady") -> tuple[subprocess.Popen[bytes], list[int]]:
    from bench_sidecar import payload

    from poolwatch.codec.snapshot import dump_snapshot

    template = json.dumps(dump_snapshot(payload(0, 0.0))).encode()
    cmd = [sys.executable, str(HERE / "fake_fleet.py"), str(FLEET_PORTS), "900", mode]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None
    assert proc.stdout is not None
    proc.stdin.write(template)
    proc.stdin.close()
    return proc, [int(p) for p in proc.stdout.readline().split()]


def start_sidecar(
    n: int, ports: list[int], concurrency: int, workdir: Path
) -> tuple[subprocess.Popen[bytes], str]:
    targets = workdir / "targets.yaml"
    lines = [
        f"  - {{name: rank{i}, source: probe, url: 'http://127.0.0.1:{ports[i % len(ports)]}/rank{i}'}}"
        for i in range(n)
    ]
    targets.write_text("targets:\n" + "\n".join(lines) + "\n")
    port = free_port()
    cmd = [sys.executable, "-m", "poolwatch.cli", "serve", "--targets-file", str(targets)]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--scrape-concurrency", str(concurrency)]
    cmd += ["--log-level", "warning"]
    env = {
        **os.environ,
        "POOLWATCH_WORKER": "fleet-bench",
        "POOLWATCH_STATE_FILE": str(workdir / "state.json"),
    }
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url + "/healthz", timeout=2).read()
            return proc, url
        except OSError:
            time.sleep(0.2)
    return proc, url


def scrape_metrics(url: str, timeout: float) -> tuple[float | None, str]:
    """(seconds to answer, page) of the sidecar's /metrics; (None, "") on no answer."""
    started = time.monotonic()
    try:
        text = urllib.request.urlopen(url + "/metrics", timeout=timeout).read().decode()
    except OSError:
        return None, ""
    return time.monotonic() - started, text


def target_scrapes(url: str) -> dict[str, int] | None:
    """{target: scrapes so far} from the sidecar's JSON API; None on no answer."""
    try:
        doc = json.load(urllib.request.urlopen(url + "/api/v1/targets", timeout=30))
    except OSError:
        return None
    return {t["name"]: int(t["scrapes"]) for t in doc}


def parse_page(text: str) -> dict[str, dict[str, float]]:
    """{metric: {labels: value}} of an exposition page."""
    out: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        series, value = line.rsplit(" ", 1)
        name, _, labels = series.partition("{")
        out.setdefault(name, {})[labels] = float(value)
    return out


def stop(proc: subprocess.Popen[bytes]) -> float | None:
    """Seconds from SIGTERM to exit (None: it had to be killed after 15 s)."""
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None
    return time.monotonic() - started


def fleet(n: int, concurrency: int, seconds: float, mode: str = "steady") -> dict[str, Any]:
    """The sidecar watching ``n`` fake probes (``mode``: see fake_fleet.py), with the load average."""
    fleet_proc, ports = start_fleet(mode)
    with tempfile.TemporaryDirectory() as tmp:
        sidecar, url = start_sidecar(n, ports, concurrency, Path(tmp))
        try:
            time.sleep(6.0)  # connections opened, the targets' first jittered scrapes done
            metrics_s, _ = scrape_metrics(url, 30)
            # The window: scrape counts read through the JSON API (a few ms) at both ends; a
            # 1,000-rank /metrics page takes up to a second to render under this load, and its
            # counters would be read at an unknown point of that.
            before = target_scrapes(url)
            t0, cpu0 = time.monotonic(), proc_cpu(sidecar.pid)
            time.sleep(seconds)
            t1, cpu1 = time.monotonic(), proc_cpu(sidecar.pid)
            after = target_scrapes(url)
            later_s, last_page = scrape_metrics(url, 30)
            rss = proc_rss_mb(sidecar.pid)
            last = parse_page(last_page)
        finally:
            stopped = stop(sidecar)
            fleet_proc.kill()
            fleet_proc.wait()
    result: dict[str, Any] = {"cpu": (cpu1 - cpu0) / (t1 - t0) * 100, "rss": rss, "stop": stopped}
    result["load"] = os.getloadavg()[0]
    answers = [s for s in (metrics_s, later_s) if s is not None]
    result["metrics_s"] = max(answers) if len(answers) == 2 else None
    if before is not None and after is not None and last:
        deltas = [after.get(k, 0) - before.get(k, 0) for k in after] + [0] * (n - len(after))
        window = t1 - t0
        result["rate"] = sum(deltas) / window
        result["per_answer_us"] = result["cpu"] * 1e4 / result["rate"] if result["rate"] else None
        result["late"] = sum(1 for d in deltas if d < int(window / INTERVAL) - 1)
        stale = last.get("poolwatch_snapshot_stale", {})
        result["stale"] = sum(1 for v in stale.values() if v) + max(0, n - len(stale))
    return result


def fleet_plan(central: dict[str, Any], pod: dict[str, Any], page: dict[str, Any]) -> str:
    """What watching 10,000 ranks costs either way, from the measured figures."""
    ranks = 10_000
    lines = ["Watching 10,000 ranks (from the figures above; 8 ranks per pod):"]
    if "cpu" in central and "rss" in central:
        per_rank_cpu = central["cpu"] / 1000
        per_rank_mb = max(0.0, central["rss"] - pod.get("rss", 0.0)) / 992
        sidecars = -(-ranks // 1000)
        lines.append(
            f"  central sidecars of 1,000 ranks each: {sidecars} x ({central['cpu']:.0f} % of a core, "
            f"{central['rss']:.0f} MB) = {sidecars * central['cpu'] / 100:.1f} cores, "
            f"{sidecars * central['rss'] / 1024:.1f} GB; {per_rank_cpu:.3f} % of a core and "
            f"{per_rank_mb:.2f} MB per rank"
        )
    if "cpu" in pod and "rss" in pod:
        pods = ranks // 8
        lines.append(
            f"  per-pod sidecars: {pods} x ({pod['cpu']:.2f} % of a core, {pod['rss']:.0f} MB) = "
            f"{pods * pod['cpu'] / 100:.1f} cores, {pods * pod['rss'] / 1024:.1f} GB"
        )
    series = page.get("series_per_rank_1000")
    size = page.get("bytes_per_rank_1000")
    if series and size:
        lines.append(
            f"  Prometheus: {series:.0f} series per rank -> {ranks * series / 1e6:.2f} M active series; "
            f"{size / 1024:.1f} KB of exposition per rank per scrape -> "
            f"{ranks * size / 15 / 1e6:.1f} MB/s at a 15 s scrape interval (before gzip)"
        )
    return "\n".join(lines)
