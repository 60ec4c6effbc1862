"""An incident bundle carries no prompt text, token ids, secret or user-identifying name, even when
the request and the settings carried them (docs/security.md, guarantee 18).

Everything a bundle could pick up is planted: a request id made of prompt text and token ids, a log
message and a probe error quoting the prompt, credentials and tokens in every receiver and target
URL, credential files, the node's secret in the probe directory, a worker, pod and instance name, a
model path under a user's home and a relative one, the workers a sidecar follows.  The bundle is
fetched from a real sidecar's API (JSON and Markdown)
and exported by ``poolwatch incident export --file`` from the saved incidents file after the
sidecar stopped; no planted string appears in any of them.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import httpx
from tests.helpers import asgi_client

from poolwatch.cli import main
from poolwatch.model.findings import CallSite, CallSiteKind, Frame, Repair, RepairKind, Tripwire, TripwireKind
from poolwatch.model.rank import IncidentKind, Pool
from poolwatch.model.snapshot import Incident, ProbeHealth, Snapshot
from poolwatch.settings.sidecar import Settings
from poolwatch.sidecar.app import create_app
from poolwatch.sidecar.incidents.redact import settings_summary
from poolwatch.sidecar.store import SnapshotStore
from rigs.fakes.clock import FakeClock

PROMPT = "Tell me the launch codes for account 4929-1234"
TOKENS = "151644, 872, 198, 40451"
NODE_SECRET = "9f2c61d0a7be4e1c8d3f5a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f809"
PLANTED = {
    "prompt": PROMPT,
    "prompt words": "launch codes",
    "token ids": TOKENS,
    "a request id's own text": "session=alice",
    "webhook token": "XOXB-WEBHOOK-TOKEN",
    "alertmanager password": "hunter2",
    "alertmanager user": "oncall-user",
    "alertmanager query key": "AMQUERYKEY",
    "probe signature": "PROBESIGVALUE",
    "basic auth user": "basic-auth-alice",
    "password file": "PASSWORDFILE",
    "node secret": NODE_SECRET,
    "worker name": "customer-acme-prefill",
    "pod name": "acme-pod-7",
    "namespace": "acme-tenant",
    "instance address": "10.1.2.3",
    "home directory": "/home/alice",
    "user in a log path": "alice",
    "a worker followed (--probe-workers)": "acme-decode-followed",
    "a relative model path's directories": "alice-private-models/",
}
RID = f"session=alice|{PROMPT}|{TOKENS}"
SITE = CallSite(
    CallSiteKind.FREE,
    (Frame("sglang/srt/mem_cache/memory_pool.py", 387, "HybridReqToTokenPool.free"),),
    seq=3,
)


def _settings(tmp_path: Path) -> Settings:
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir(mode=0o700)
    (probe_dir / "probe-secret").write_text(NODE_SECRET)
    return Settings.from_env(
        {
            "POOLWATCH_WORKER": "customer-acme-prefill",
            "POOLWATCH_POD": "acme-pod-7",
            "POOLWATCH_NAMESPACE": "acme-tenant",
            "POOLWATCH_MODEL": "/home/alice/models/private-ckpt",
            "POOLWATCH_WEBHOOK_URLS": "https://hooks.slack.com/services/T000/B000/XOXB-WEBHOOK-TOKEN",
            "POOLWATCH_ALERTMANAGER_URLS": "https://oncall-user:hunter2@am.example:9093/api?key=AMQUERYKEY",
            "POOLWATCH_PROBE_URLS": "http://127.0.0.1:7000/v1/snapshot?sig=PROBESIGVALUE",
            "POOLWATCH_BASIC_AUTH_USER": "basic-auth-alice",
            "POOLWATCH_BASIC_AUTH_PASSWORD_FILE": str(tmp_path / "PASSWORDFILE"),
            "POOLWATCH_PROBE_DIR": str(probe_dir),
            "POOLWATCH_PROBE_WORKERS": "customer-acme-prefill,acme-decode-followed",
            "POOLWATCH_LOG_PATHS": "/home/alice/sglang.log",
            "POOLWATCH_STATE_FILE": str(tmp_path / "state" / "alerts.json"),
        }
    )


def _planted_snapshot(seed: Snapshot, seq: int) -> Snapshot:
    worker = replace(
        seed.worker, worker="customer-acme-prefill", instance="10.1.2.3:8000", model="alice-private-models/x"
    )
    wire = Tripwire(
        TripwireKind.FREE_AND_LIVE, Pool.MAMBA, (3,), "process_prefill_chunk", 2, (RID,), call_site=SITE
    )
    done = Repair(RepairKind.REFUSE, Pool.MAMBA, 1, (3,), "mamba_pool.free", 2, (RID, "tree"), call_site=SITE)
    said = Incident(IncidentKind.SCHEDULER_EXCEPTION, f"Scheduler hit an exception: prompt={PROMPT!r}", 1.0)
    health = ProbeHealth(errors_total=1, last_error=f"ValueError: bad request {PROMPT} {TOKENS}", guard=True)
    return replace(
        seed,
        worker=worker,
        seq=seq,
        taken_at=seed.taken_at + seq,
        tripwires=(wire,),
        repairs=(done,),
        incidents=(said,),
        probe=health,
        queues={**seed.queues},
    )


def _leaks(text: str) -> list[str]:
    return [name for name, value in PLANTED.items() if value in text]


async def test_no_prompt_token_id_secret_or_name_reaches_a_bundle(
    seed_snapshot: Snapshot, clock: FakeClock, tmp_path: Path
) -> None:
    settings = _settings(tmp_path)
    (tmp_path / "PASSWORDFILE").write_text("password-value")
    store = SnapshotStore()
    receivers = httpx.MockTransport(lambda request: httpx.Response(200))  # no network
    app = create_app(settings, store=store, sources=[], clock=clock, transport=receivers)
    texts: list[str] = []
    async with asgi_client(app) as client:
        for seq in range(1, 6):
            store.put(_planted_snapshot(seed_snapshot, seq))
        listed = (await client.get("/api/v1/incidents")).json()
        assert len(listed) == 2  # the tripwire and the refusals
        for item in listed:
            texts.append((await client.get(f"/api/v1/incidents/{item['id']}")).text)
            texts.append((await client.get(f"/api/v1/incidents/{item['id']}/bundle.md")).text)
    out = tmp_path / "export"
    assert (
        main(
            [
                "incident",
                "export",
                "--file",
                str(tmp_path / "state" / "alerts.incidents.json"),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    exported = sorted(out.iterdir())
    assert len(exported) == 4
    texts += [p.read_text() for p in exported]
    for text in texts:
        assert "req-" in text  # the requests are named, by hash
        assert "HybridReqToTokenPool.free" in text  # and the line that freed it is there
        assert _leaks(text) == []
    assert any("tree" in text for text in texts)  # poolwatch's own owner name stays


def test_a_bearer_token_file_is_only_said_to_be_set(tmp_path: Path) -> None:
    settings = Settings.from_env({"POOLWATCH_BEARER_TOKEN_FILE": str(tmp_path / "BEARERFILE")})
    assert settings_summary(settings)["alerting"]["bearer_token_file"] == "<set>"
