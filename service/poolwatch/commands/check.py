"""Check one probe endpoint or engine server once: exit 0 balanced, 1 imbalance, 2 unreachable.

An engine server is read through its ``/metrics`` page, as the engine's sources room reads it
(``--source``: ``sglang`` by default when the URL is not a probe).

The whole check has one deadline, ``--timeout`` (plus ``--window`` when reading SGLang over a
window): a target that accepts and never answers, or trickles its answer a byte at a time, ends
the check with exit 2 and one line naming the deadline, however many requests were under way.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from poolwatch.codec.snapshot import dump_snapshot
from poolwatch.conservation import Balance, Basis, Finding, assess_snapshot, describe
from poolwatch.engines import DEFAULT_ENGINE
from poolwatch.errors import Reason, ScrapeError
from poolwatch.model.rank import SourceKind
from poolwatch.model.snapshot import Snapshot
from poolwatch.sources.base import Target
from poolwatch.sources.engine import EngineSources, SourceOptions, engine_sources, sources_of
from poolwatch.sources.probe_source import SNAPSHOT_PATH, ProbeSource

__all__ = ["DEFAULT_TIMEOUT_S", "CheckResult", "add_arguments", "check", "run"]

DEFAULT_TIMEOUT_S = 10.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "url", help="a probe endpoint (http://host:port) or an engine server (SGLang: http://host:30000)"
    )
    parser.add_argument(
        "--source",
        choices=("auto", "probe", *(room.engine for room in engine_sources())),
        default="auto",
        help=f"what URL is (auto: a probe, else a {DEFAULT_ENGINE} server)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of one line per rank")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help="the whole check must finish within this (plus --window); a silent target is exit 2",
    )
    parser.add_argument(
        "--window",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="an engine server only: read for this long ("
        + "; ".join(_idle_help(r) for r in engine_sources())
        + ")",
    )
    parser.add_argument(
        "--interval", type=float, default=5.0, metavar="SECONDS", help="between reads (--window)"
    )
    parser.add_argument(
        "--worker", default="", help="worker name to report (default: from the payload or URL)"
    )


def _idle_help(room: EngineSources) -> str:
    if room.idle_confirm_s is None:
        return f"{room.engine}: never proves a rank idle"
    return f"{room.engine}: >= {room.idle_confirm_s:.0f} s can prove a rank idle"


@dataclass(frozen=True, slots=True)
class CheckResult:
    url: str
    source: str
    snapshots: tuple[Snapshot, ...]

    @property
    def imbalance(self) -> bool:
        return any(_proven(f) for s in self.snapshots for f in assess_snapshot(s)) or any(
            s.tripwires for s in self.snapshots
        )


def _proven(f: Finding) -> bool:
    return f.balance in (Balance.SURPLUS, Balance.DEFICIT) and f.basis is not Basis.NONE


async def check(
    url: str,
    client: httpx.AsyncClient,
    *,
    source: str = "auto",
    worker: str = "",
    window: float = 0.0,
    interval: float = 5.0,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> CheckResult:
    """One check; raises ``ScrapeError`` when the target cannot be read."""
    if source in ("auto", "probe"):
        probe = ProbeSource(Target(f"probe:{url}", SourceKind.PROBE, url, worker))
        try:
            return CheckResult(url, "probe", tuple(await probe.scrape(client)))
        except ScrapeError as exc:
            unreachable = exc.reason in (Reason.CONNECT, Reason.TIMEOUT)
            if source == "probe" or unreachable or url.rstrip("/").endswith(SNAPSHOT_PATH):
                raise
    room = sources_of(DEFAULT_ENGINE if source == "auto" else source)
    target = Target(f"{room.metrics}:{url}", room.metrics, url, worker)
    metrics = room.make(target, clock, SourceOptions())
    snaps = await metrics.scrape(client)
    deadline = clock() + window
    while clock() + interval <= deadline:
        await sleep(interval)
        snaps = await metrics.scrape(client)
    return CheckResult(url, room.metrics, tuple(snaps))


def run(args: argparse.Namespace) -> int:
    if not (args.timeout > 0 and args.window >= 0 and args.interval > 0):
        print("poolwatch check: --timeout and --interval must be > 0, --window >= 0", file=sys.stderr)
        return 2
    try:
        result = asyncio.run(_run(args))
    except ScrapeError as exc:
        print(f"poolwatch check: {args.url}: {exc} ({exc.reason.value})", file=sys.stderr)
        return 2
    print(json.dumps(as_json(result), indent=2) if args.json else as_text(result))
    return 1 if result.imbalance else 0


async def _run(args: argparse.Namespace) -> CheckResult:
    """The check within its deadline (a ``ScrapeError`` with reason ``timeout`` past it)."""
    deadline = args.timeout + args.window
    try:
        async with asyncio.timeout(deadline), httpx.AsyncClient(timeout=args.timeout) as client:
            return await check(
                args.url,
                client,
                source=args.source,
                worker=args.worker,
                window=args.window,
                interval=args.interval,
            )
    except TimeoutError:
        raise ScrapeError(Reason.TIMEOUT, f"no complete answer within {deadline:g} s (--timeout)") from None


def as_text(result: CheckResult) -> str:
    """One line per rank (``describe``), then its tripwires and incidents."""
    lines = []
    for snap in result.snapshots:
        verdict = describe(assess_snapshot(snap)) or "no pool figures"
        lines.append(f"{snap.worker.key}  [{snap.source}, {snap.phase.value}]  {verdict}")
        for t in snap.tripwires:
            slots = ", ".join(str(s) for s in t.slots[:16])
            lines.append(
                f"  tripwire {t.kind.value} in {t.pool.value}: slots {slots} (after {t.first_seen_hook})"
            )
        for i in snap.incidents:
            lines.append(f"  incident {i.kind.value}: {i.message.splitlines()[0] if i.message else ''}")
    status = "imbalance" if result.imbalance else "no imbalance proven"
    return "\n".join([*lines, f"{result.url}: {status}"])


def as_json(result: CheckResult) -> dict[str, Any]:
    workers = []
    for snap in result.snapshots:
        findings = [
            {
                "pool": f.pool.value,
                "balance": f.balance.value,
                "gap": f.gap,
                "basis": f.basis.value,
                "slots": f.slots,
            }
            for f in assess_snapshot(snap)
        ]
        workers.append({"key": snap.worker.key, "findings": findings, "snapshot": dump_snapshot(snap)})
    return {"url": result.url, "source": result.source, "imbalance": result.imbalance, "workers": workers}
