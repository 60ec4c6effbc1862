"""The page a real vLLM server's double free sends through the stack as deployed: one run, shared
by ``test_vllm_page.py`` and ``benchmarks/bench_page.py --engine vllm``.

On 127.0.0.1 only, with the helpers of :mod:`rigs.stack.launch` (what bench_page runs
for SGLang): real Alertmanager with ``deploy/alertmanager/alertmanager.yaml`` and its templates,
every receiver (webhook, Slack, PagerDuty) pointed at a loopback recorder; the rendered vLLM pod
example on loopback (:mod:`rigs.vllm.pod`): its sidecar as ``poolwatch serve``, real Prometheus
with its rules and its PodMonitor's scrape, and in the ``vllm`` container's place the real vLLM
CPU server (:mod:`rigs.vllm.server`) with that container's poolwatch environment (the probe's
switches, its directory, the worker's name); vLLM's output is the file the container's ``tee``
writes (the sidecar's ``POOLWATCH_LOG_PATHS``).

Then the clients of :mod:`rigs.vllm.load` send completions (each prompt its own, no prefix shared)
and, after ``warm`` seconds, one of them the request the fault plugin frees twice. vLLM 0.32 puts
that request's last, uncached block at the front of the free queue at the first free, so the next
allocation that reaches it -- a request already waiting, or at the latest the fault's client's next
one -- pops it at ``ref_cnt == -1`` and EngineCore dies on ``assert block.ref_cnt == 0``: the
clients go on until it does. The times come from vLLM's side: the fault (just before the second
free) and EngineCore's "fatal error" record as the fault plugin stamps them in the server's log, and
EngineCore's exit (its ``/proc`` entry, looked at every 5 ms). The page is the first webhook
notification of PoolwatchDoubleFree firing for the pod's ``full`` pool, its text the first Slack
message naming the pod, the pool, the rank and exactly the ids freed twice.
"""

from __future__ import annotations

import contextlib
import functools
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import httpx

from rigs.stack import deployed
from rigs.stack.launch import start_alertmanager, start_prometheus, start_sidecar
from rigs.stack.manifests import kustomize
from rigs.stack.processes import free_port, http_ok, poll
from rigs.stack.prometheus import Prometheus
from rigs.stack.receivers import Post, WebhookRecorder
from rigs.vllm.load import Clients, Load
from rigs.vllm.pod import EXAMPLE, POD, example_pod
from rigs.vllm.server import (
    Freed,
    engine_core_pid,
    exited,
    fatal_logged,
    freed_twice,
    server,
    start,
)

ALERT, POOL = "PoolwatchDoubleFree", "full"
STARTUP = 900.0  # wall s for vLLM to serve: the API server, EngineCore and the worker each import vLLM
_TRIPWIRE = re.compile(r"Tripwire (\w+): \d+ (?:slot|block|page)s? [^\[]*\[([\d, \-]+)\]")


def tripwire_ids(text: str) -> dict[str, set[int]]:
    """``{kind: ids}`` of every "Tripwire <kind>: n slots [3, 7-9]" sentence in ``text``."""
    out: dict[str, set[int]] = {}
    for kind, shown in _TRIPWIRE.findall(text):
        ids = out.setdefault(kind, set())
        for part in shown.split(","):
            low, _, high = part.strip().partition("-")
            ids.update(range(int(low), int(high or low) + 1))
    return out


@dataclass
class PageRun:
    """One run's times (wall s, ``time.time()``) and what the receivers got."""

    load: str
    startup: float = 0.0  # s from starting vLLM until it served
    fault: float | None = None  # the fault plugin's stamp: just before the second free
    ids: tuple[int, ...] = ()  # the blocks freed twice
    fatal: float | None = None  # EngineCore's "fatal error" record was created
    exited: float | None = None  # EngineCore's process was seen gone
    fired: float | None = None  # the sidecar's firing time, as that notification's startsAt gives it
    paged: float | None = None  # first webhook notification of the alert, firing, for the pod's pool
    named: float | None = None  # first Slack text naming pod, pool, rank and exactly the freed ids
    text: str = ""  # that Slack text (else the first Slack text of the alert for the pod)
    requests: int = 0  # completions sent, the fault's included
    notes: list[str] = field(default_factory=list)

    @property
    def before_death(self) -> bool:
        """The page was received before EngineCore's fatal record (or with no crash at all)."""
        return self.paged is not None and (self.fatal is None or self.paged < self.fatal)


def observe(run: PageRun, posts: list[Post], freed: Freed | None) -> None:
    """Fill ``run``'s page and text from what the receivers got so far."""
    for post in posts:
        if "/slack/" in post.path:
            text = str(post.body.get("attachments", [{}])[0].get("text", ""))
            if f"pod {POD}," not in text or ALERT not in text or f"pool {POOL}" not in text:
                continue
            run.text = run.text or text
            named = set().union(*tripwire_ids(text).values())
            if "rank dp " in text and freed is not None and named == set(freed.ids) and run.named is None:
                run.named, run.text = post.received_at, text
        elif "/pagerduty/" not in post.path:
            for alert in post.body.get("alerts", []):
                labels = alert["labels"]
                key = (labels.get("alertname"), labels.get("pool"), labels.get("worker"))
                if alert["status"] == "firing" and key == (ALERT, POOL, POD) and run.paged is None:
                    run.paged = post.received_at
                    run.fired = datetime.fromisoformat(alert["startsAt"].replace("Z", "+00:00")).timestamp()


class ExitWatch:
    """Notes when EngineCore's process exits (its pid from the server's log), every 5 ms."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="engine-core-exit")
        self._thread.start()

    def _run(self) -> None:
        pid = None
        while not self._stop.wait(0.005):
            pid = pid or engine_core_pid(self.log)
            if pid is not None and exited(pid):
                self.at = time.time()
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def pool_published(sidecar: int) -> bool | None:
    """True once the sidecar exports the probe's ``full`` pool (it has the probe's snapshot)."""
    try:
        body = httpx.get(f"http://127.0.0.1:{sidecar}/metrics", timeout=2.0).text
    except httpx.HTTPError:
        return None
    return True if "poolwatch_pool_capacity_slots{" in body and f'pool="{POOL}"' in body else None


def scraped(prom: Prometheus) -> bool | None:
    return True if prom.query("up == 1") else None


def finished(run: PageRun, now: float, limit: float, started: float, warm: float) -> bool:
    """The watch ends ``limit`` s after the fault (or after it was due), once the crash and the page
    with its ids were both seen, or 8 s after the crash (the window after a crash bench_page keeps)."""
    if now > (run.fault or started + warm) + limit:
        return True
    crashed = run.fatal is not None and run.exited is not None
    if crashed and run.paged is not None and run.named is not None:
        return True
    return run.fatal is not None and now > run.fatal + 8.0


def run_once(root: Path, load: Load, limit: float = 60.0) -> PageRun:
    """One run in ``root`` (a fresh directory): the stack, vLLM, the load, and a watch of ``limit``
    s after the fault."""
    run = PageRun(load.name)
    rendered = deployed.Rendered(kustomize(EXAMPLE))
    with contextlib.ExitStack() as cleanup:
        hooks = WebhookRecorder()
        cleanup.callback(hooks.stop)
        am_url, am_log = start_alertmanager(cleanup, root, hooks)
        am_port, port = int(am_url.rsplit(":", 1)[1]), free_port()
        example = example_pod(root, rendered, am_port, port)
        pod, log = example.sidecar, example.log
        how = server(root, port, Path(example.engine_env["POOLWATCH_PROBE_DIR"]), example.engine_env)
        began = time.time()
        vllm = start(cleanup, how.argv, log, how.env)
        logs = [am_log, start_sidecar(cleanup, root, pod), log]
        poll(
            functools.partial(http_ok, f"http://127.0.0.1:{pod.port}/readyz"),
            timeout=60,
            what="the sidecar",
            logs=logs,
        )
        prom, prom_log = start_prometheus(cleanup, root, rendered, [pod], am_port)
        url = f"http://127.0.0.1:{port}"
        poll(lambda: http_ok(f"{url}/health"), timeout=STARTUP, every=1.0, what="vLLM to serve", logs=logs)
        run.startup = time.time() - began
        poll(functools.partial(pool_published, pod.port), timeout=60, what="the probe's pool", logs=logs)
        poll(lambda: scraped(prom), timeout=60, what="Prometheus' scrape", logs=[*logs, prom_log])
        watch = ExitWatch(log)
        cleanup.callback(watch.stop)
        clients = Clients(url, str(how.model), load).start()
        cleanup.callback(clients.stop)
        started = time.time()
        while not finished(run, time.time(), limit, started, load.warm):
            time.sleep(0.02)
            freed = freed_twice(log)
            run.fault, run.ids = (freed.at, freed.ids) if freed else (None, ())
            run.fatal, run.exited = fatal_logged(log), watch.at
            if run.fatal is not None:
                clients.stopped.set()  # EngineCore is gone: no more load
            observe(run, list(hooks.posts), freed)
        run.requests = clients.sent
        if run.fault is None:
            run.notes.append("the fault request never finished")
        if not vllm.alive():
            run.notes.append(f"the API server exited ({vllm.popen.returncode})")
        return run
