"""What a person is paged with: the Go templates of the shipped receivers (Slack, PagerDuty
Events v2, email), inlined in each receiver's fields so the plain Alertmanager configuration and
the ``AlertmanagerConfig`` object (which cannot load template files) carry the very same text.

Each alert renders its place (cluster when labelled, namespace, pod, role, rank, pool), a bold
"will crash at its next idle moment" line when its description says so, the cause (the sidecar's
description names the gap, the slot ids, the hook and the requests; a rule copy's gives counts and
says it stands in), and the runbook and dashboard links.  A copy the sidecar resolved because its
cause was replaced (:data:`~poolwatch.notify.paths.SUPERSEDED`, see
:mod:`poolwatch.notify.alertmanager`) is not rendered: its notification is an update, titled
``[UPDATE]``, with one line saying what the new text replaces.  Rendered by a real Alertmanager in
``tests/e2e/test_notification_templates.py``.

**Every value is escaped for its receiver, here and only here** (:class:`Flavor`): a label or an
annotation may carry what a log or a client wrote (an exception message with ``<!channel>``,
``<@U123>``, ``<https://evil|Runbook>``, a newline and a forged line), so each one is piped through
its receiver's replacements -- Slack mrkdwn (:data:`SLACK`: ``&``, ``<``, ``>`` as Slack's entities,
so no mention, channel ping or disguised link), plain text (:data:`PLAIN`: PagerDuty's summary and
details, the email's text part and subject: ``<`` and ``>`` as the look-alikes U+2039 and U+203A, inert in
every tool that renders them later), HTML (:data:`HTML`: Alertmanager's ``html/template`` escapes
the email's HTML itself) -- and control characters (newlines included) become a space in all of
them, so a value cannot start a line of its own.  The templates' own markup (bold, line breaks,
the links' labels) is written here, never taken from a value.
"""

from __future__ import annotations

from dataclasses import dataclass

from poolwatch.engines import ENGINES
from poolwatch.notify.paths import PATH_LABEL, RULES, SUPERSEDED

__all__ = [
    "CRASH_PATTERN",
    "HTML",
    "PLAIN",
    "SLACK",
    "UPDATE_MARK",
    "Flavor",
    "email_html",
    "email_subject",
    "pagerduty",
    "slack_text",
    "slack_title",
    "text",
]

# the sidecar says "will crash at its next idle moment", the rule copy "crashes at its next idle moment"
CRASH_PATTERN = "crash(es)? at its next idle moment"
UPDATE_MARK = "[UPDATE]"  # how an update notification's title begins
_IS_UPDATE = (  # sets $update when the notification resolves a superseded copy (an update)
    "{{ $update := false }}{{ range .Alerts.Resolved }}"
    f"{{{{ if .Annotations.{SUPERSEDED} }}}}{{{{ $update = true }}}}{{{{ end }}}}{{{{ end }}}}"
)
_CONTROL = ("[[:cntrl:]]+", " ")  # RE2: newlines, tabs, escapes... one space: no value starts a line


@dataclass(frozen=True, slots=True)
class Flavor:
    """How one kind of receiver shows a value: ``(RE2 pattern, replacement)`` pairs, in order."""

    name: str
    replacements: tuple[tuple[str, str], ...]

    def __call__(self, expr: str) -> str:
        """The template action that prints ``expr`` (``.Labels.pod``, ``.``) escaped."""
        pipe = "".join(f' | reReplaceAll "{pattern}" "{repl}"' for pattern, repl in self.replacements)
        return f"{{{{ {expr}{pipe} }}}}"


SLACK = Flavor("slack mrkdwn", (_CONTROL, ("&", "&amp;"), ("<", "&lt;"), (">", "&gt;")))
PLAIN = Flavor("plain text", (_CONTROL, ("<", "\u2039"), (">", "\u203a")))
HTML = Flavor("html", (_CONTROL,))  # Alertmanager renders an email's HTML with html/template


# whose own check kills a rank at its next idle moment (the engines with an idle check of their own)
_STRICT_CHECK = " and ".join(f"{e.title}'s" for e in ENGINES if e.idle_check) + " strict idle check"


def _place(cluster_label: str, bold: tuple[str, str], e: Flavor) -> str:
    b0, b1 = bold
    # the configured cluster label, else a "cluster" label (external labels often add one)
    label = cluster_label or "cluster"
    cluster = f"{{{{ with .Labels.{label} }}}}cluster {e('.')}, {{{{ end }}}}"
    return (
        f"{b0}Where:{b1} {cluster}namespace {e('.Labels.namespace')}, pod {e('.Labels.pod')}"
        f"{{{{ with .Labels.role }}}}, {e('.')}{{{{ end }}}}"
        f"{{{{ if .Labels.dp_rank }}}}, rank dp {e('.Labels.dp_rank')} tp {e('.Labels.tp_rank')} "
        f"pp {e('.Labels.pp_rank')}{{{{ end }}}}"
        f"{{{{ with .Labels.pool }}}}, pool {e('.')}{{{{ end }}}}"
        f"{{{{ with .Labels.target }}}}, target {e('.')}{{{{ end }}}}"
    )


def _alert(cluster_label: str, bold: tuple[str, str], newline: str, e: Flavor) -> str:
    """One alert's block (inside ``range .Alerts``)."""
    b0, b1 = bold
    n = newline
    return (
        f'{{{{ if and (eq .Status "firing") (match "{CRASH_PATTERN}" .Annotations.description) }}}}'
        f"{b0}WILL CRASH AT ITS NEXT IDLE MOMENT{b1} ({_STRICT_CHECK}){n}{{{{ end }}}}"
        f"{b0}{e('.Labels.alertname')}{b1} ({e('.Labels.severity')}, {{{{ .Status }}}}): "
        f"{e('.Annotations.summary')}{n}"
        f"{_place(cluster_label, bold, e)}{n}"
        f"{b0}Cause:{b1} {e('.Annotations.description')}{n}"
        f"{{{{ if eq .Labels.{PATH_LABEL} \"{RULES}\" }}}}(Prometheus' rule copy: the sidecar's exact "
        f"copy did not reach Alertmanager){n}{{{{ end }}}}"
        f"{b0}Runbook:{b1} {e('.Annotations.runbook_url')}{n}"
        f"{b0}Dashboard:{b1} {e('.Annotations.dashboard_url')}{n}"
    )


def _updates(bold: tuple[str, str], newline: str, e: Flavor) -> str:
    """One line per superseded copy: the text below replaces the one sent before."""
    b0, b1 = bold
    return (
        f"{{{{ range .Alerts.Resolved }}}}{{{{ if .Annotations.{SUPERSEDED} }}}}{b0}UPDATE:{b1} "
        f"{e('.Labels.alertname')} on pod {e('.Labels.pod')}{{{{ with .Labels.pool }}}} ({e('.')} pool)"
        f"{{{{ end }}}}: the cause below replaces the one sent before.{newline}{{{{ end }}}}{{{{ end }}}}"
    )


def text(
    cluster_label: str = "",
    bold: tuple[str, str] = ("", ""),
    newline: str = "\n",
    flavor: Flavor = PLAIN,
    alerts: str = ".Alerts",
) -> str:
    """Every alert of the notification (``alerts``: ``.Alerts.Firing`` or ``.Alerts.Resolved``
    for those only), one block each (superseded copies: one update line, in the whole text)."""
    updates = _updates(bold, newline, flavor) if alerts == ".Alerts" else ""
    return (
        f"{updates}{{{{ range {alerts} }}}}{{{{ if not .Annotations.{SUPERSEDED} }}}}"
        f"{_alert(cluster_label, bold, newline, flavor)}{newline}{{{{ end }}}}{{{{ end }}}}"
    )


def _title(e: Flavor) -> str:
    return (
        f"{_IS_UPDATE}{{{{ if $update }}}}{UPDATE_MARK} {{{{ end }}}}"
        '[{{ .Status | toUpper }}{{ if eq .Status "firing" }}:{{ .Alerts.Firing | len }}{{ end }}] '
        f"{e('.GroupLabels.alertname')} on {e('.CommonLabels.namespace')}/{e('.GroupLabels.worker')}"
        f"{{{{ with .GroupLabels.pool }}}} ({e('.')} pool){{{{ end }}}}"
    )


def slack_title() -> str:
    return _title(SLACK)


def slack_text(cluster_label: str = "") -> str:
    return text(cluster_label, ("*", "*"), flavor=SLACK)


def email_subject() -> str:
    return _title(PLAIN)


def email_html(cluster_label: str = "") -> str:
    body = text(cluster_label, ("<b>", "</b>"), "<br>\n", flavor=HTML)
    return f"<html><body><h3>{_title(HTML)}</h3>\n{body}</body></html>"


def pagerduty(cluster_label: str = "") -> dict[str, str]:
    """Events v2 fields: a one-line summary (the first firing alert's place and cause, marked as an
    update when it is one: PagerDuty appends it to the open incident of the same ``dedup_key``),
    full details.  Plain text throughout (:data:`PLAIN`)."""
    e = PLAIN
    first = "(index (or .Alerts.Firing .Alerts) 0)"
    summary = (
        f"{_IS_UPDATE}{{{{ if $update }}}}UPDATE: {{{{ end }}}}"
        f'{{{{ with {first} }}}}{{{{ if match "{CRASH_PATTERN}" .Annotations.description }}}}'
        f"WILL CRASH AT NEXT IDLE: {{{{ end }}}}{e('.Labels.alertname')} {e('.Labels.namespace')}/"
        f"{e('.Labels.pod')}{{{{ with .Labels.pool }}}} {e('.')} pool{{{{ end }}}}: "
        f"{e('.Annotations.description')}{{{{ end }}}}"
    )
    return {
        "description": summary,
        "severity": '{{ if eq .CommonLabels.severity "critical" }}critical{{ else }}warning{{ end }}',
        "client": "poolwatch",
        "client_url": f"{{{{ with {first} }}}}{{{{ .Annotations.dashboard_url }}}}{{{{ end }}}}",
        "runbook": f"{{{{ with {first} }}}}{{{{ .Annotations.runbook_url }}}}{{{{ end }}}}",
        "alerts": text(cluster_label),
        # Alertmanager adds these four to every PagerDuty event's details unless they are set, with
        # its default template: the raw description (an exception's text) unescaped. Set, shipped.
        "firing": text(cluster_label, alerts=".Alerts.Firing"),
        "resolved": text(cluster_label, alerts=".Alerts.Resolved"),
        "num_firing": "{{ .Alerts.Firing | len }}",
        "num_resolved": "{{ .Alerts.Resolved | len }}",
    }
