"""The seed flow on a real release, as an upstream bug report sees it: the alert text and the incident
bundle name SGLang's own function that freed the chunked request's Mamba slot.

A long prompt whose request id carries prompt text (``RID``) and whose token ids are ``TOKENS`` is
prefilled in chunks through SGLang's real ``process_prefill_chunk`` (on 0.5.4.post1 it frees the
chunked request's row with the Mamba default: #12432).  Every snapshot the probe publishes goes
into a sidecar's store, which keeps the incidents; the detector's families write the alert text.

* guard on: the refusal inside the wrapped ``mamba_pool.free`` carries the engine frames above it --
  ``HybridReqToTokenPool.free`` in ``memory_pool.py``, called by ``process_prefill_chunk`` in
  ``disaggregation/prefill.py`` at the very line that frees the row (read from the installed
  source) -- and PoolwatchProbeRepaired's text and the bundle name them;
* guard off: the chunk tripwire finds the slot after the free returned; the one-shot witness catches
  the next identical free, and PoolwatchDoubleFree's text and the bundle name the same lines;
* neither bundle carries the request id's text or the prompt's token ids.

``POOLWATCH_INCIDENT_OUT=<dir>`` also writes both bundles there (how ``docs/examples/`` is refreshed).
"""

from __future__ import annotations

import inspect
import json
import os
from pathlib import Path
from typing import Any

from poolwatch import __version__
from poolwatch.conservation import findings
from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.families.balance import PoolBalance
from poolwatch.detect.families.repairs import GuardRepairs
from poolwatch.detect.family import Seen
from poolwatch.model.findings import CallSiteKind
from poolwatch.model.snapshot import Snapshot
from poolwatch.probe.lifecycle import detach
from poolwatch.settings.sidecar import Settings
from poolwatch.sidecar.incidents.export import bundle_json, bundle_markdown
from poolwatch.sidecar.incidents.log import IncidentLog
from poolwatch.sidecar.incidents.redact import request_name, settings_summary
from poolwatch.sidecar.store import SnapshotStore
from rigs.checks import report
from rigs.sglang.driver import Driver

__all__ = ["incident_checks"]

RID = "user=alice; prompt=Tell me the launch codes"
TOKENS = list(range(300, 330))


def freeing_line() -> int:
    """The line of the installed ``process_prefill_chunk`` that frees the chunked request's row."""
    from sglang.srt.disaggregation.prefill import SchedulerDisaggregationPrefillMixin

    lines, first = inspect.getsourcelines(SchedulerDisaggregationPrefillMixin.process_prefill_chunk)
    return first + next(i for i, text in enumerate(lines) if "req_to_token_pool.free(" in text)


def _flow(driver: Driver, *, guard: bool) -> list[Snapshot]:
    """Three chunk boundaries of one long prompt; the snapshots the probe published, in order."""
    s = driver.new("prefill", guard=guard)
    driver.boundary()
    probe = driver.probe
    c = driver.arrive(RID, TOKENS)
    for _ in range(3):
        driver.prefill([c], chunk=8)
        driver.boundary()
        driver.chunk_step()
        driver.samples.append(probe.latest)  # a finding publishes at once: the sidecar's long-poll has it
    driver.boundary()
    driver.boundary()
    snaps = list(driver.samples)
    detach(s)
    return snaps


def _sidecar(snaps: list[Snapshot]) -> IncidentLog:
    store = SnapshotStore(fresh_within=1e9)
    incidents = IncidentLog(store, {"version": __version__, "settings": settings_summary(Settings())})
    store.subscribe(incidents.observe)
    for snap in snaps:
        store.put(snap)
    return incidents


def _texts(snap: Snapshot) -> list[str]:
    seen = Seen(snap, findings(snap))
    signals = [*PoolBalance(DetectorConfig()).signals(seen), *GuardRepairs().signals(seen)]
    return [f"{s.alert}: {s.description}" for s in signals]


def _bundle(incidents: IncidentLog, kind: str) -> dict[str, Any] | None:
    for item in incidents.listed():
        if item["kind"] == kind:
            return incidents.bundle(item["id"])
    return None


def _names_sglang(site: dict[str, Any] | None, line: int) -> bool:
    frames = (site or {}).get("frames", [])
    return (
        len(frames) >= 2
        and (frames[0]["file"], frames[0]["function"])
        == ("sglang/srt/mem_cache/memory_pool.py", "HybridReqToTokenPool.free")
        and frames[1]["file"] == "sglang/srt/disaggregation/prefill.py"
        and frames[1]["function"].endswith("process_prefill_chunk")
        and frames[1]["line"] == line
    )


def _clean(text: str) -> bool:
    """No request text and no run of the prompt's token ids in ``text``."""
    return RID not in text and "alice" not in text and "300, 301, 302" not in text and "[300, 301" not in text


def _out(name: str, body: dict[str, Any]) -> None:
    where = os.environ.get("POOLWATCH_INCIDENT_OUT")
    if where:
        Path(where).mkdir(parents=True, exist_ok=True)
        (Path(where) / f"{name}.md").write_text(bundle_markdown(body))
        (Path(where) / f"{name}.json").write_text(
            json.dumps(bundle_json(body), indent=1, sort_keys=True) + "\n"
        )


def _check(label: str, snaps: list[Snapshot], kind: str, wanted: str, site_kind: CallSiteKind) -> None:
    line = freeing_line()
    incidents = _sidecar(snaps)
    body = _bundle(incidents, kind)
    texts = [t for s in snaps for t in _texts(s)]
    said = [t for t in texts if wanted in t and f"…/prefill.py:{line} process_prefill_chunk" in t]
    markdown, doc = (bundle_markdown(body), json.dumps(bundle_json(body))) if body else ("", "")
    report(
        f"incident, {label}: the alert text and the bundle name SGLang's own function that freed the slot",
        bool(said)
        and body is not None
        and body["call_site"]["kind"] == site_kind.value
        and _names_sglang(body["call_site"], line)
        and f"| 2 | `sglang/srt/disaggregation/prefill.py` | {line} |" in markdown,
        {"alert": said[-1] if said else texts[-3:], "call_site": body and body["call_site"], "line": line},
    )
    report(
        f"incident, {label}: the bundle carries no request text and no token id, the request by its hash",
        body is not None and _clean(markdown) and _clean(doc) and request_name(RID) in markdown,
        {"request": request_name(RID)},
    )
    if body is not None:
        _out(f"sglang-{snaps[-1].worker.release}-seed-{label.replace(' ', '-')}", body)


def incident_checks(driver: Driver) -> None:
    """The seed flow with guard on and off on ``driver``'s release (#12432 live)."""
    on = _flow(driver, guard=True)
    _check("guard on", on, "refuse", "The refused free was called by …/memory_pool.py:", CallSiteKind.FREE)
    off = _flow(driver, guard=False)
    wanted = "the same free, caught again at iteration"
    _check("guard off", off, "free_and_live", wanted, CallSiteKind.NEXT_FREE)
