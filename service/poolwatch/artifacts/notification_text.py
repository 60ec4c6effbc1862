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
"""

from __future__ import annotations

from poolwatch.notify.paths import PATH_LABEL, RULES, SUPERSEDED

__all__ = [
    "CRASH_PATTERN",
    "UPDATE_MARK",
    "email_subject",
    "email_html",
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


def _place(cluster_label: str, bold: tuple[str, str]) -> str:
    b0, b1 = bold
    # the configured cluster label, else a "cluster" label (external labels often add one)
    label = cluster_label or "cluster"
    cluster = f"{{{{ with .Labels.{label} }}}}cluster {{{{ . }}}}, {{{{ end }}}}"
    return (
        f"{b0}Where:{b1} {cluster}namespace {{{{ .Labels.namespace }}}}, pod {{{{ .Labels.pod }}}}"
        "{{ with .Labels.role }}, {{ . }}{{ end }}"
        "{{ if .Labels.dp_rank }}, rank dp {{ .Labels.dp_rank }} tp {{ .Labels.tp_rank }} "
        "pp {{ .Labels.pp_rank }}{{ end }}"
        "{{ with .Labels.pool }}, pool {{ . }}{{ end }}"
        "{{ with .Labels.target }}, target {{ . }}{{ end }}"
    )


def _alert(cluster_label: str, bold: tuple[str, str], newline: str) -> str:
    """One alert's block (inside ``range .Alerts``)."""
    b0, b1 = bold
    n = newline
    return (
        f'{{{{ if and (eq .Status "firing") (match "{CRASH_PATTERN}" .Annotations.description) }}}}'
        f"{b0}WILL CRASH AT ITS NEXT IDLE MOMENT{b1} (SGLang's strict idle check){n}{{{{ end }}}}"
        f"{b0}{{{{ .Labels.alertname }}}}{b1} ({{{{ .Labels.severity }}}}, {{{{ .Status }}}}): "
        f"{{{{ .Annotations.summary }}}}{n}"
        f"{_place(cluster_label, bold)}{n}"
        f"{b0}Cause:{b1} {{{{ .Annotations.description }}}}{n}"
        f"{{{{ if eq .Labels.{PATH_LABEL} \"{RULES}\" }}}}(Prometheus' rule copy: the sidecar's exact "
        f"copy did not reach Alertmanager){n}{{{{ end }}}}"
        f"{b0}Runbook:{b1} {{{{ .Annotations.runbook_url }}}}{n}"
        f"{b0}Dashboard:{b1} {{{{ .Annotations.dashboard_url }}}}{n}"
    )


def _updates(bold: tuple[str, str], newline: str) -> str:
    """One line per superseded copy: the text below replaces the one sent before."""
    b0, b1 = bold
    return (
        f"{{{{ range .Alerts.Resolved }}}}{{{{ if .Annotations.{SUPERSEDED} }}}}{b0}UPDATE:{b1} "
        "{{ .Labels.alertname }} on pod {{ .Labels.pod }}{{ with .Labels.pool }} ({{ . }} pool){{ end }}: "
        f"the cause below replaces the one sent before.{newline}{{{{ end }}}}{{{{ end }}}}"
    )


def text(cluster_label: str = "", bold: tuple[str, str] = ("", ""), newline: str = "\n") -> str:
    """Every alert of the notification, one block each (superseded copies: one update line)."""
    return (
        f"{_updates(bold, newline)}{{{{ range .Alerts }}}}{{{{ if not .Annotations.{SUPERSEDED} }}}}"
        f"{_alert(cluster_label, bold, newline)}{newline}{{{{ end }}}}{{{{ end }}}}"
    )


def slack_title() -> str:
    return (
        f"{_IS_UPDATE}{{{{ if $update }}}}{UPDATE_MARK} {{{{ end }}}}"
        '[{{ .Status | toUpper }}{{ if eq .Status "firing" }}:{{ .Alerts.Firing | len }}{{ end }}] '
        "{{ .GroupLabels.alertname }} on {{ .CommonLabels.namespace }}/{{ .GroupLabels.worker }}"
        "{{ with .GroupLabels.pool }} ({{ . }} pool){{ end }}"
    )


def slack_text(cluster_label: str = "") -> str:
    return text(cluster_label, ("*", "*"))


def email_subject() -> str:
    return slack_title()


def email_html(cluster_label: str = "") -> str:
    body = text(cluster_label, ("<b>", "</b>"), "<br>\n")
    return f"<html><body><h3>{slack_title()}</h3>\n{body}</body></html>"


def pagerduty(cluster_label: str = "") -> dict[str, str]:
    """Events v2 fields: a one-line summary (the first firing alert's place and cause, marked as an
    update when it is one: PagerDuty appends it to the open incident of the same ``dedup_key``),
    full details."""
    first = "(index (or .Alerts.Firing .Alerts) 0)"
    summary = (
        f"{_IS_UPDATE}{{{{ if $update }}}}UPDATE: {{{{ end }}}}"
        f'{{{{ with {first} }}}}{{{{ if match "{CRASH_PATTERN}" .Annotations.description }}}}'
        "WILL CRASH AT NEXT IDLE: {{ end }}{{ .Labels.alertname }} {{ .Labels.namespace }}/{{ .Labels.pod }}"
        "{{ with .Labels.pool }} {{ . }} pool{{ end }}: {{ .Annotations.description }}{{ end }}"
    )
    return {
        "description": summary,
        "severity": '{{ if eq .CommonLabels.severity "critical" }}critical{{ else }}warning{{ end }}',
        "client": "poolwatch",
        "client_url": f"{{{{ with {first} }}}}{{{{ .Annotations.dashboard_url }}}}{{{{ end }}}}",
        "runbook": f"{{{{ with {first} }}}}{{{{ .Annotations.runbook_url }}}}{{{{ end }}}}",
        "alerts": text(cluster_label),
    }
