"""``poolwatch emulate``: run an emulated SGLang PD cluster and print where each face listens.

The lead wires :func:`add_arguments` and :func:`run` into the main CLI.  Bad settings print one
line on stderr and return 2.
"""

from __future__ import annotations

import argparse
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from poolwatch_emulator.build import ModelShape
from poolwatch_emulator.cluster import Cluster
from poolwatch_emulator.cluster_config import ClusterConfig
from poolwatch_emulator.faces import WorkerServer, attach_probes
from poolwatch_emulator.faults import parse_fault
from poolwatch_emulator.scenarios import SCENARIOS, scenario_config
from poolwatch_emulator.versions import RELEASES
from poolwatch_emulator.workload import WorkloadConfig

__all__ = ["add_arguments", "config_from_args", "run"]


# the model's pool sizes on the command line: (flag, ModelShape field, help); defaults are ModelShape's
_SHAPE_OPTIONS = (
    ("--full-kv-tokens", "full_kv_tokens", "full-attention KV pool size per rank, in tokens"),
    ("--mamba-slots", "mamba_slots", "Mamba pool size per rank (0 = no Mamba pool)"),
    ("--swa-kv-tokens", "swa_kv_tokens", "sliding-window pool size (SWA-hybrid model)"),
    (
        "--hicache-host-tokens",
        "host_kv_tokens",
        "HiCache host pool size (--enable-hierarchical-cache; needs --mamba-slots 0)",
    ),
    ("--page-size", "page_size", "tokens per KV page (SGLang's --page-size)"),
    ("--max-running", "max_running_requests", "running requests per rank at most"),
)
_OPTIONAL = {"mamba_slots", "swa_kv_tokens", "host_kv_tokens"}  # pools a model may lack: 0 is none
_SHAPE = ModelShape()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--prefill", type=int, default=1, help="PD prefill workers")
    a("--decode", type=int, default=1, help="PD decode workers")
    a("--unified", type=int, default=0, help="non-PD workers (use with --prefill 0 --decode 0)")
    a("--tp", type=int, default=1, help="tensor-parallel ranks per worker")
    a("--dp", type=int, default=1, help="data-parallel ranks per worker")
    a("--version", default="0.5.4.post1", choices=sorted(RELEASES), help="SGLang release to reproduce")
    a(
        "--fault",
        action="append",
        default=[],
        metavar="NAME@T",
        help="inject a fault: NAME, NAME@30s, NAME@step=500, NAME@p=0.01",
    )
    a(
        "--scenario",
        default=None,
        metavar="FAULT",
        help="run FAULT's catalogue scenario (its workers, release, model, features such as speculative "
        "decoding or an encoder cache, and traffic) with FAULT armed, unless --fault says otherwise; "
        "the pool, traffic and worker options are then the scenario's",
    )
    a("--seed", type=int, default=0, help="seed of the emulated traffic (the same seed, the same run)")
    a("--log-dir", type=Path, default=None, help="write each worker's SGLang-shaped log here")
    a(
        "--probe-dir",
        type=Path,
        default=None,
        help="attach poolwatch's probe to every rank (discovery dir; {worker}: one dir per worker)",
    )
    a("--duration", type=float, default=0.0, help="simulated seconds to run (0 = until interrupted)")
    a(
        "--time-scale",
        type=float,
        default=20.0,
        help="simulated seconds per wall second (0 = as fast as possible)",
    )
    a("--dt", type=float, default=0.25, help="simulated seconds per scheduler iteration")
    a("--port-base", type=int, default=0, help="first HTTP port (0 = ephemeral ports)")
    for flag, name, text in _SHAPE_OPTIONS:
        metavar = flag.removeprefix("--").upper().replace("-", "_")  # the flag's, not the field's
        a(flag, type=int, dest=name, metavar=metavar, default=getattr(_SHAPE, name) or 0, help=text)
    a("--chunked-prefill-size", type=int, default=4096, help="prefill chunk in tokens")
    a("--rate", type=float, default=1.5, help="requests per simulated second during bursts")
    a("--no-strict-idle-check", action="store_true", help="SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_IDLE=0")


def config_from_args(args: argparse.Namespace) -> ClusterConfig:
    """The cluster settings; ``ValueError`` naming the first bad one."""
    if getattr(args, "scenario", None) is not None:
        return _scenario_from_args(args)
    sizes: dict[str, Any] = {}
    for _, name, _ in _SHAPE_OPTIONS:
        size = getattr(args, name)
        sizes[name] = size or None if name in _OPTIONAL else size
    shape = replace(_SHAPE, **sizes)
    config = ClusterConfig(
        prefill=args.prefill,
        decode=args.decode,
        unified=args.unified,
        tp=args.tp,
        dp=args.dp,
        version=args.version,
        shape=shape,
        workload=replace(WorkloadConfig(), rate=args.rate),
        faults=tuple(parse_fault(f) for f in args.fault),
        seed=args.seed,
        dt=args.dt,
        chunked_prefill_size=args.chunked_prefill_size,
        idle_check_strict=not args.no_strict_idle_check,
        log_dir=args.log_dir,
    )
    config.check()
    return config


def _scenario_from_args(args: argparse.Namespace) -> ClusterConfig:
    if args.scenario not in SCENARIOS:
        raise ValueError(
            f"unknown scenario {args.scenario!r} (one per fault: {', '.join(sorted(SCENARIOS))})"
        )
    overrides: dict[str, Any] = {
        "tp": args.tp,
        "dp": args.dp,
        "seed": args.seed,
        "dt": args.dt,
        "idle_check_strict": not args.no_strict_idle_check,
        "log_dir": args.log_dir,
    }
    if args.fault:
        overrides["faults"] = tuple(parse_fault(f) for f in args.fault)
    config = scenario_config(args.scenario, **overrides)
    config.check()
    return config


def run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    try:
        config = config_from_args(args)
        cluster = Cluster(config)
    except ValueError as exc:
        print(f"poolwatch emulate: {exc}", file=sys.stderr)
        return 2
    servers = [
        WorkerServer(w, args.port_base + i if args.port_base else 0).start()
        for i, w in enumerate(cluster.workers)
    ]
    for worker, server in zip(cluster.workers, servers, strict=True):
        log = config.log_dir / f"{worker.name}.log" if config.log_dir else "(in memory)"
        print(f"{worker.name}: {server.url}/metrics {server.url}/get_server_info log={log}", file=out)
    if args.probe_dir is not None:
        print(
            f"probes: {attach_probes(cluster, args.probe_dir)} ranks, discovery in {args.probe_dir}", file=out
        )
    out.flush()
    try:
        _drive(cluster, args.duration, args.time_scale)
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
        for server in servers:
            server.stop()
    done = sum(r.emu_finished_total for r in cluster.schedulers)
    crashed = ", ".join(f"{w.name} ({w.crash_message})" for w in cluster.crashed) or "none"
    print(
        f"simulated {cluster.clock.now:.0f} s in {cluster.steps} steps; {done} requests finished; "
        f"crashed: {crashed}",
        file=out,
    )
    return 0


def _drive(cluster: Cluster, duration: float, time_scale: float) -> None:
    if time_scale <= 0:
        cluster.run_for(duration if duration > 0 else 3600.0)
        return
    cluster.start(time_scale)
    stop = threading.Event()
    stop.wait(duration / time_scale if duration > 0 else None)
