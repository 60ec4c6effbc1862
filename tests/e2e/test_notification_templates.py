"""What the on-call engineer receives, rendered by a real Alertmanager from the shipped
configuration (deploy/alertmanager/alertmanager.yaml: routes, inhibit rules, templates) and
recorded by loopback receivers: Slack and PagerDuty Events v2 bodies by an HTTP recorder, email by
a tiny SMTP recorder.  Only the integrations' addresses and ``group_interval`` are changed
(tests/e2e/deployed.py).

* The sidecar's copy of a double free and Prometheus' rule copy both reach Alertmanager: the rule
  copy is inhibited, the page carries the sidecar's text (slot ids, hook, requests, the crash
  warning), the place (cluster, namespace, pod, role, rank, pool) and the links.
* A rule copy with no sidecar copy (the direct path is down) pages by itself and says so.
* A warning opens a ticket: Slack and email, with the same text.
* Slot ids learned after the first page reach Slack, PagerDuty and the webhook as an update of the
  same incident (the sidecar's receiver changes ``poolwatch_detail``).
"""

from __future__ import annotations

import asyncio
import contextlib
import email
import email.policy
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from html import unescape
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.notify.fakes import alert

from poolwatch.detect.alert import Alert
from poolwatch.notify.alertmanager import AlertmanagerReceiver
from poolwatch.notify.paths import DIRECT, PATH_LABEL, RULES
from rigs.fakes.clock import FakeClock
from rigs.stack.deployed import alertmanager_config
from rigs.stack.processes import poll
from rigs.stack.prometheus import run_alertmanager
from rigs.stack.receivers import SmtpRecorder, WebhookRecorder

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

NS, POD = "qwen3-next-pd", "prefill-0"
RANK = {"worker": POD, "role": "prefill", "dp_rank": "0", "tp_rank": "1", "pp_rank": "0"}
SIDECAR_TEXT = (
    "The mamba pool of prefill-0 (prefill, dp 0 tp 1 pp 0) counts 1 slot twice (gap -1): a double free "
    "[exact figures from the in-process probe, iteration 412]. Tripwire free_duplicate: 1 slot [452] "
    "first seen after process_prefill_chunk at iteration 411, requests [req-7f3a, req-91c2]. "
    "SGLang's idle check is strict on this rank: the server will crash at its next idle moment."
)
RULE_TEXT = "1 slot(s) of the mamba pool on prefill-0 (prefill, dp 0 tp 1 pp 0) are counted twice"
RUNBOOK = "https://github.com/poolwatch/poolwatch/blob/main/docs/runbooks/PoolwatchDoubleFree.md"
DASHBOARD = "http://grafana.example/d/poolwatch-worker/poolwatch-worker?var-namespace=qwen3-next-pd"


@dataclass
class Stack:
    url: str
    hooks: WebhookRecorder
    smtp: SmtpRecorder
    log: Path

    def post(self, *alerts: dict[str, Any]) -> None:
        response = httpx.post(f"{self.url}/api/v2/alerts", json=list(alerts), timeout=10)
        assert response.is_success, response.text

    def chat(self, kind: str, receiver: str) -> list[dict[str, Any]]:
        marker = f"/{kind}/{receiver}"
        return [p.body for p in list(self.hooks.posts) if p.path.endswith(marker)]

    def held(self) -> list[dict[str, Any]]:
        body: list[dict[str, Any]] = httpx.get(f"{self.url}/api/v2/alerts", timeout=10).json()
        return body


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    with contextlib.ExitStack() as cleanup:
        hooks, smtp = WebhookRecorder(), SmtpRecorder()
        cleanup.callback(hooks.stop)
        cleanup.callback(smtp.stop)
        url, process = run_alertmanager(cleanup, tmp_path, alertmanager_config(hooks.url, smtp.address))
        yield Stack(url, hooks, smtp, process.log)


def copy(path: str, description: str, severity: str = "critical", **labels: str) -> dict[str, Any]:
    """One path's copy of the double free on prefill-0's mamba pool, as it is posted."""
    return {
        "labels": {
            "alertname": "PoolwatchDoubleFree",
            "severity": severity,
            "cluster": "us-east-1a",
            "namespace": NS,
            "pod": POD,
            **RANK,
            "pool": "mamba",
            PATH_LABEL: path,
            **labels,
        },
        "annotations": {
            "summary": "A memory-pool slot was freed twice.",
            "description": description,
            "runbook_url": RUNBOOK,
            "dashboard_url": DASHBOARD,
        },
    }


def test_the_page_carries_the_sidecars_exact_text_and_the_rule_copy_is_inhibited(stack: Stack) -> None:
    stack.post(copy(DIRECT, SIDECAR_TEXT))
    stack.post(copy(RULES, RULE_TEXT))
    slack = poll(lambda: stack.chat("slack", "poolwatch-page") or None, timeout=60, what="the Slack page")
    text = slack[0]["attachments"][0]["text"]
    for part in (
        "WILL CRASH AT ITS NEXT IDLE MOMENT",
        "cluster us-east-1a, namespace qwen3-next-pd, pod prefill-0, prefill, rank dp 0 tp 1 pp 0, "
        "pool mamba",
        "Tripwire free_duplicate: 1 slot [452] first seen after process_prefill_chunk",
        "requests [req-7f3a, req-91c2]",
        f"*Runbook:* {RUNBOOK}",
        f"*Dashboard:* {DASHBOARD}",
    ):
        assert part in text, (part, text)
    assert slack[0]["attachments"][0]["title"].startswith(
        "[FIRING:1] PoolwatchDoubleFree on qwen3-next-pd/prefill-0"
    )

    event = poll(lambda: stack.chat("pagerduty", "poolwatch-page") or None, timeout=60, what="the PD event")[
        0
    ]
    assert event["event_action"] == "trigger"
    assert event["payload"]["severity"] == "critical"
    summary = event["payload"]["summary"]
    assert summary.startswith(
        "WILL CRASH AT NEXT IDLE: PoolwatchDoubleFree qwen3-next-pd/prefill-0 mamba pool:"
    )
    assert "[452]" in summary
    assert "[452]" in event["payload"]["custom_details"]["alerts"]
    assert {link["href"] for link in event["links"]} == {RUNBOOK, DASHBOARD}

    def rule_copy_inhibited() -> bool | None:
        rules = [a for a in stack.held() if a["labels"][PATH_LABEL] == RULES]
        return True if rules and rules[0]["status"]["state"] == "suppressed" else None

    poll(rule_copy_inhibited, timeout=30, what="the rule copy inhibited", logs=[stack.log])
    every = [m["attachments"][0]["text"] for m in stack.chat("slack", "poolwatch-page")]
    assert not [t for t in every if "counted twice" in t], every  # the rule copy's text never went out


def test_a_rule_copy_alone_pages_and_says_the_sidecars_copy_is_missing(stack: Stack) -> None:
    stack.post(copy(RULES, RULE_TEXT + ". Drain and restart the worker."))
    slack = poll(lambda: stack.chat("slack", "poolwatch-page") or None, timeout=60, what="the Slack page")
    text = slack[0]["attachments"][0]["text"]
    assert RULE_TEXT in text
    assert "Prometheus' rule copy: the sidecar's exact copy did not reach Alertmanager" in text
    assert "WILL CRASH" not in text  # the rule copy of a double free does not claim it


def test_a_warning_opens_a_ticket_by_slack_and_email_with_the_same_text(stack: Stack) -> None:
    leak = (
        "The kv pool of prefill-0 (prefill, dp 0 tp 1 pp 0) has lost 12 slots (gap +12): a leak "
        "[exact figures from the in-process probe, iteration 90]. SGLang's idle check only warns here: "
        "capacity shrinks until the worker restarts."
    )
    warning = copy(DIRECT, leak, severity="warning", alertname="PoolwatchSlotLeak", pool="kv")
    stack.post(warning)
    mails = poll(lambda: stack.smtp.mails or None, timeout=90, what="the ticket email", logs=[stack.log])
    message = email.message_from_string(mails[0].data, policy=email.policy.default)
    assert message["Subject"].startswith("[FIRING:1] PoolwatchSlotLeak on qwen3-next-pd/prefill-0 (kv pool)")
    assert mails[0].recipients == ("llm-serving-oncall@example.com",)
    html = message.get_body(("html",))
    plain = message.get_body(("plain",))
    assert html is not None
    assert plain is not None
    for body in (unescape(html.get_content()), plain.get_content()):  # html/template escapes the "+"
        assert "has lost 12 slots (gap +12)" in body
        assert "pod prefill-0, prefill, rank dp 0 tp 1 pp 0, pool kv" in body
        assert "WILL CRASH" not in body
    slack = poll(lambda: stack.chat("slack", "poolwatch-ticket") or None, timeout=30, what="the Slack ticket")
    assert "has lost 12 slots (gap +12)" in slack[0]["attachments"][0]["text"]


def sidecar_alert(description: str) -> Alert:
    """The double free as the sidecar's detector holds it (posted by the sidecar's own receiver)."""
    labels = {
        "cluster": "us-east-1a",
        "namespace": NS,
        "pod": POD,
        **RANK,
        "pool": "mamba",
        PATH_LABEL: DIRECT,
    }
    return alert(
        FakeClock(time.time()),  # Alertmanager judges startsAt/endsAt against its wall clock
        subject=f"{POD}/dp0-tp1-pp0",
        labels=tuple(sorted(labels.items())),
        annotations={
            "summary": "A memory-pool slot was freed twice.",
            "description": description,
            "runbook_url": RUNBOOK,
            "dashboard_url": DASHBOARD,
        },
    )


def send(receiver: AlertmanagerReceiver, alert: Alert) -> None:
    async def post() -> None:
        async with httpx.AsyncClient(timeout=10) as client:
            await receiver.send(client, [alert], time.time())

    asyncio.run(post())


def test_slot_ids_learned_later_reach_every_receiver_as_an_update_of_the_same_incident(stack: Stack) -> None:
    """The sidecar first knows the pool and the gap, then the slot ids: the receivers get a first
    page with the gap, then, within the critical route's group_interval, an update naming the
    slot (Slack "[UPDATE]", PagerDuty a trigger with the same dedup_key: appended to the open
    incident, not a second one), while the rule copy stays inhibited."""
    counts = SIDECAR_TEXT.split(" Tripwire", maxsplit=1)[0]  # pool and gap, no slot ids yet
    receiver = AlertmanagerReceiver(stack.url, resend_interval=60.0)
    first = sidecar_alert(counts)
    send(receiver, first)
    stack.post(copy(RULES, RULE_TEXT))
    page = poll(lambda: stack.chat("slack", "poolwatch-page") or None, timeout=60, what="the first page")
    assert "(gap -1)" in page[0]["attachments"][0]["text"]
    assert "[452]" not in page[0]["attachments"][0]["text"]

    send(receiver, replace(first, annotations={**first.annotations, "description": SIDECAR_TEXT}))
    sent = time.time()
    slack = poll(
        lambda: stack.chat("slack", "poolwatch-page")[1:] or None,
        timeout=60,
        what="the update",
        logs=[stack.log],
    )
    waited = time.time() - sent
    update = slack[0]["attachments"][0]
    assert update["title"].startswith("[UPDATE] [FIRING:1] PoolwatchDoubleFree on qwen3-next-pd/prefill-0")
    assert (
        "*UPDATE:* PoolwatchDoubleFree on pod prefill-0 (mamba pool): the cause below replaces"
        in update["text"]
    )
    assert "Tripwire free_duplicate: 1 slot [452]" in update["text"]
    assert update["text"].count("Cause:") == 1  # the superseded copy is not rendered again
    print(f"update received {waited:.1f} s after the sidecar posted it")  # group_interval is scaled here

    events = poll(
        lambda: ((e := stack.chat("pagerduty", "poolwatch-page"))[1:] and e) or None,
        timeout=30,
        what="PD update",
    )
    assert [e["event_action"] for e in events] == ["trigger", "trigger"]
    assert len({e["dedup_key"] for e in events}) == 1  # one incident: the update is appended to it
    assert events[1]["payload"]["summary"].startswith("UPDATE: WILL CRASH AT NEXT IDLE: PoolwatchDoubleFree")
    assert "[452]" in events[1]["payload"]["summary"]

    hooks = [p.body for p in list(stack.hooks.posts) if p.path.endswith("/hook/poolwatch-page")]
    assert [sorted(a["status"] for a in h["alerts"]) for h in hooks] == [["firing"], ["firing", "resolved"]]
    assert len({h["groupKey"] for h in hooks}) == 1
    held = {a["labels"][PATH_LABEL]: a["status"]["state"] for a in stack.held()}
    assert held == {DIRECT: "active", RULES: "suppressed"}  # one sidecar copy, the rule copy still silenced


# --- hostile text: what a log line or a client can put in a label or an annotation --------------

HOSTILE_CAUSE = (
    "ValueError: <!channel> <@U024BE7LH> see <https://evil.example/fix|Runbook> & more\n"
    "*Runbook:* https://evil.example/phish\r\nBcc: victim@example.com <script>alert(1)</script>"
)
HOSTILE_WORKER = "prefill-0<!here>\r\nBcc: victim@example.com"


def hostile(severity: str, alertname: str) -> dict[str, Any]:
    """The sidecar's copy of an alert whose cause and worker carry mrkdwn, HTML and a new line."""
    posted = copy(DIRECT, HOSTILE_CAUSE, severity=severity, alertname=alertname, worker=HOSTILE_WORKER)
    return posted


def lines_starting(text: str, prefix: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(prefix)]


def found(needles: tuple[str, ...], *texts: str) -> list[str]:
    """The ``needles`` that occur in any of ``texts`` (none, for a text escaped as it should be)."""
    return [n for n in needles if any(n in t for t in texts)]


def test_hostile_text_reaches_slack_and_pagerduty_escaped_for_each(stack: Stack) -> None:
    stack.post(hostile("critical", "PoolwatchDoubleFree"))
    slack = poll(lambda: stack.chat("slack", "poolwatch-page") or None, timeout=60, what="the Slack page")
    attachment = slack[0]["attachments"][0]
    text, title = attachment["text"], attachment["title"]
    raw = ("<!channel>", "<@U024BE7LH>", "<https://evil.example", "<!here>", "<script>")
    assert found(raw, text, title) == []  # before: every one of them verbatim
    assert (
        "&lt;!channel&gt; &lt;@U024BE7LH&gt; see &lt;https://evil.example/fix|Runbook&gt; &amp; more" in text
    )
    assert "prefill-0&lt;!here&gt; Bcc: victim@example.com" in title
    assert lines_starting(text, "*Runbook:*") == [f"*Runbook:* {RUNBOOK}"]  # no forged line
    assert not lines_starting(text, "Bcc:")

    event = poll(lambda: stack.chat("pagerduty", "poolwatch-page") or None, timeout=60, what="the PD event")[
        0
    ]
    summary, details = event["payload"]["summary"], event["payload"]["custom_details"]["alerts"]
    assert found(("<", ">", "\n"), summary) == []
    assert (
        "\u2039!channel\u203a \u2039@U024BE7LH\u203a see \u2039https://evil.example/fix|Runbook\u203a"
        in summary
    )
    assert found(("<!channel>", "<https://evil"), details) == []
    assert lines_starting(details, "Runbook:") == [f"Runbook: {RUNBOOK}"]
    assert {link["href"] for link in event["links"]} == {RUNBOOK, DASHBOARD}
    # Alertmanager's own default details (firing, resolved) carried the raw exception text (issue 42)
    custom = event["payload"]["custom_details"]
    firing = custom["firing"]
    assert found(("<!channel>", "<https://evil", "<script>", "\r"), firing) == []
    assert "\u2039!channel\u203a" in firing
    assert lines_starting(firing, "Runbook:") == [f"Runbook: {RUNBOOK}"]
    assert (custom["num_firing"], custom["resolved"].strip()) == ("1", "")


def test_hostile_text_reaches_email_escaped_and_injects_no_header(stack: Stack) -> None:
    stack.post(hostile("warning", "PoolwatchSlotLeak"))
    mails = poll(lambda: stack.smtp.mails or None, timeout=90, what="the ticket email", logs=[stack.log])
    message = email.message_from_string(mails[0].data, policy=email.policy.default)
    assert mails[0].recipients == ("llm-serving-oncall@example.com",)  # no Bcc smuggled in
    assert message["Bcc"] is None
    subject = str(message["Subject"])
    assert found(("\r", "\n", "<!here>"), subject) == []
    html = message.get_body(("html",))
    plain = message.get_body(("plain",))
    assert html is not None
    assert plain is not None
    raw_html = html.get_content()
    assert found(("<script>",), raw_html) == []
    assert "&lt;script&gt;" in raw_html  # html/template escaped it
    assert "&lt;!channel&gt;" in raw_html
    assert raw_html.count("<b>Runbook:</b>") == 1
    text = plain.get_content()
    assert found(("<!channel>", "<script>"), text) == []
    assert lines_starting(text, "Runbook:") == [f"Runbook: {RUNBOOK}"]
    assert not lines_starting(text, "Bcc:")
    slack = poll(lambda: stack.chat("slack", "poolwatch-ticket") or None, timeout=30, what="the Slack ticket")
    assert "<!channel>" not in slack[0]["attachments"][0]["text"]
